"""The generated code itself: the tutorial's four patterns, no tensor ever stashed on ctx, and
the counter-example (the tutorial's SinhBad) caught by the same checks the generated tests use."""

from __future__ import annotations

import ast
import contextlib
import inspect
from pathlib import Path

import pytest
import torch
import yaml
from helpers import (
    HEAVY_EXAMPLES,
    assert_chains_close,
    calls_externals,
    derivative_chain,
    import_path,
    sample,
    strategy_matrix,
)
from torch.autograd.function import FunctionCtx

from codegen.build import pipeline, write

ROOT = Path(__file__).resolve().parents[2]
GENERATED = sorted((ROOT / "generated").glob("*.py"))
MODULES = [p for p in GENERATED if p.name != "__init__.py"]
BUILDS = ["save_inputs", "save_outputs", "intermediates", "nested", "fuse"]  # each example built so
EXAMPLES = sorted(path.stem for path in (ROOT / "specs").glob("*.yaml"))
# examples calling external functions are nested only (and never fused): built once, as nested
NESTED_ONLY = {name for name in EXAMPLES if calls_externals(ROOT / "specs" / f"{name}.yaml")}


def _builds_matrix() -> list:
    """(example, where) for the checked-in module and every build of it; ``make test`` takes one
    per example, in turn (a heavy one as checked in), ``make test-all`` all."""
    return strategy_matrix(EXAMPLES, lambda name: ["checked_in", "nested"] if name in NESTED_ONLY
                           else ["checked_in", *BUILDS], fixed=dict.fromkeys(HEAVY_EXAMPLES, "checked_in"))


def _spec_of(path: Path) -> dict:
    return yaml.safe_load((ROOT / "specs" / f"{path.stem}.yaml").read_text())


@pytest.fixture(scope="module")
def example_builds(tmp_path_factory):
    """(build, name) -> the example's NAME.py built with that strategy, or fused, on first use
    (``make test`` uses a sample of the pairs). The spec keeps its path (specs/NAME.yaml), so a
    build another test file made of the same spec is read from the session's build cache."""
    folder = tmp_path_factory.mktemp("examples")

    def built(build: str, name: str) -> Path:
        out = folder / build / name / "out"
        if not (out / f"{name}.py").exists():
            spec = _spec_of(Path(name))
            spec.update(fuse=True) if build == "fuse" else spec.update(strategy=build)
            specs = folder / build / name / "specs"
            specs.mkdir(parents=True)
            (specs / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
            write.write_files(out, pipeline.generate(specs / f"{name}.yaml", root=specs.parent))
        return out / f"{name}.py"

    return built


def _module_path(where: str, name: str, example_builds) -> Path:
    """``generated/NAME.py`` (where == "checked_in"), or the example built with strategy/fuse ``where``."""
    return ROOT / "generated" / f"{name}.py" if where == "checked_in" else example_builds(where, name)


def _functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            yield node, {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}


@pytest.mark.parametrize("name, where", _builds_matrix())
def test_only_params_are_kept_on_ctx(name, where, example_builds):
    """Tensors reach backward only through save_for_backward; ctx attributes hold params, and a param
    is a Python number: the public function refuses anything else before any Function runs.

    (0.3.0 stored a tensor passed as a param on ctx, and its gradient was silently dropped.)
    """
    path = _module_path(where, name, example_builds)
    params = set(_spec_of(path).get("params") or {})
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "ctx":
                    # besides params: the names of the gradients a nested level was asked for (str)
                    assert target.attr in params | {"needed"}, f"{path.name}:{node.lineno}: ctx.{target.attr} is not a param"
    if params:
        _assert_params_checked_before_apply(tree, name, params, path)


def _assert_params_checked_before_apply(tree: ast.Module, name: str, params: set[str], path: Path) -> None:
    """The public function calls _check_params with every param, unless each is exactly a float,
    before its first ``.apply``; and _check_params raises a TypeError for a tensor."""
    public = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
    calls = [node for node in ast.walk(public) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]
    first_apply = min(call.lineno for call in calls if call.func.attr == "apply")
    checks = [statement for statement in public.body if "_check_params(" in ast.unparse(statement)]
    assert len(checks) == 1, f"{path.name}: {name}() does not check its params"
    check = checks[0]
    assert check.lineno < first_apply, f"{path.name}: {name}() checks its params after .apply"
    call = (check.body[0] if isinstance(check, ast.If) else check).value
    assert ast.unparse(call.func) == "_check_params"
    assert {keyword.arg for keyword in call.keywords} == params
    assert all(isinstance(keyword.value, ast.Name) and keyword.value.id == keyword.arg for keyword in call.keywords)
    if isinstance(check, ast.If):  # what skips the check: each param's type exactly float, nothing else
        assert ast.unparse(check.test) == " or ".join(f"type({keyword.arg}) is not float" for keyword in call.keywords)
    helper = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_check_params")
    helper_text = ast.unparse(helper)
    assert "isinstance(value, torch.Tensor)" in helper_text and "raise TypeError(" in helper_text


_TORCH_BOOKKEEPING = {"to_save", "saved_for_forward", "non_differentiable", "dirty_tensors", "materialize_grads"}


def _holds_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_tensor(item) for item in value.values())
    return False


@contextlib.contextmanager
def tensors_stored_on_ctx(monkeypatch):
    """Records (Function's ctx class, attribute) for each tensor assigned to any autograd ctx while
    the block runs, torch's own bookkeeping (save_for_backward's ``to_save``, ...) left out."""
    stored = []

    def record(ctx, attribute, value):
        if attribute not in _TORCH_BOOKKEEPING and _holds_tensor(value):
            stored.append(f"{type(ctx).__name__}.{attribute}")
        object.__setattr__(ctx, attribute, value)

    with monkeypatch.context() as patch:
        patch.setattr(FunctionCtx, "__setattr__", record, raising=False)
        yield stored


@pytest.mark.parametrize("name, where", _builds_matrix())
def test_no_tensor_is_ever_kept_on_ctx_at_run_time(name, where, example_builds, monkeypatch):
    """A runtime scan of every ctx attribute, through forward and a create_graph backward to ORDER:
    with number params (at non-default values), and with tensor params, which must be refused
    before any ctx holds them (0.3.0 kept them as ``ctx.beta``: this scan fails on it)."""
    spec = _spec_of(Path(name))
    module = import_path(_module_path(where, name, example_builds))
    fn = getattr(module, name)
    domain = spec.get("domain") or {}
    inputs = [sample((3, 4) if i == 0 else (4,), *domain.get(x, (-2.0, 2.0)), seed=i) for i, x in enumerate(spec["inputs"])]
    numbers = {param: default * 1.25 + 0.1 for param, default in (spec.get("params") or {}).items()}
    tensors = {param: torch.tensor(value, dtype=torch.float64, requires_grad=True) for param, value in numbers.items()}
    with tensors_stored_on_ctx(monkeypatch) as stored:
        derivative_chain(fn, inputs, spec["order"], seed=7, params=numbers)
        if tensors:
            with contextlib.suppress(TypeError):  # the refusal; the scan below is what this test checks
                derivative_chain(fn, inputs, spec["order"], seed=7, params=tensors)
    assert not stored, f"{name} ({where}) kept tensors on ctx: {sorted(set(stored))}"


def test_the_runtime_scan_catches_a_tensor_on_ctx(monkeypatch):
    """The scan above can fail: the tutorial's SinhBad keeps its intermediates on ctx."""
    x = sample((3,), -2, 2, seed=0)
    with tensors_stored_on_ctx(monkeypatch) as stored:
        torch.autograd.grad(SinhBad.apply(x).sum(), x, create_graph=True)
    assert sorted(stored) == ["SinhBadBackward.expnegx", "SinhBadBackward.expx"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_functions_use_setup_context_and_save_only_their_inputs_and_outputs(path):
    tree = ast.parse(path.read_text())
    classes = {cls.name: (cls, methods) for cls, methods in _functions(tree)}
    bases = [name for name in classes if name.endswith("ForCompile")]
    assert bases, "no autograd.Function generated"
    for name in bases:
        _cls, methods = classes[name]
        assert set(methods) == {"forward", "setup_context", "backward"}, name
        assert methods["forward"].args.args[0].arg != "ctx", f"{name}.forward takes ctx"
        saves = [n for n in ast.walk(methods["setup_context"]) if isinstance(n, ast.Call)
                 and ast.unparse(n.func) in ("ctx.save_for_backward", "ctx.save_for_forward")]
        available = {a.arg for a in methods["forward"].args.args}
        returned = methods["forward"].body[-1]
        available |= {n.id for n in ast.walk(returned) if isinstance(n, ast.Name)}
        for call in saves:
            for arg in call.args:
                assert isinstance(arg, ast.Name) and arg.id in available, f"{name} saves {ast.unparse(arg)}"
        # its twin adds exactly the forward-mode derivative
        twin_cls, twin_methods = classes[name.removesuffix("ForCompile")]
        assert [ast.unparse(b) for b in twin_cls.bases] == [name]
        assert set(twin_methods) == {"jvp"}


def test_tutorial_patterns_are_what_the_examples_generate():
    import generated

    assert generated.square.__module__.endswith("square")
    src = {p.stem: p.read_text() for p in MODULES}
    assert "ctx.save_for_backward(x)" in src["square"]
    assert "ctx.save_for_backward(out)" in src["exp"]
    assert "return out, expm1_x, expm1_neg_x" in src["sinh"]
    assert "def backward(ctx, grad_out, grad_expm1_x, grad_expm1_neg_x):" in src["sinh"]
    assert "CubeLevel1ForCompile if torch.compiler.is_compiling() else CubeLevel1\n" in src["cube"]
    assert "return level.apply(grad_out, x)" in src["cube"]
    assert "class CubeLevel2(CubeLevel2ForCompile):" in src["cube"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_docstring_shows_formula_and_each_derivative(path):
    spec = _spec_of(path)
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc.startswith(f"{spec['name']}(")
    inputs = spec["inputs"]
    if "outputs" in spec:  # each output's formula, then the first one's derivatives (at most 24 are shown)
        first = next(iter(spec["outputs"]))
        assert " ".join(doc.split("\n\n", 1)[0].split()).endswith(f"= ({', '.join(spec['outputs'])})")
        assert all(f"\n    {name} = " in doc for name in spec["outputs"])
        assert all(f"d{first}/d{name} = " in doc for name in inputs)
        return
    assert all(f"df/d{name} = " in doc for name in inputs)
    if len(inputs) == 1:
        for k in range(2, spec["order"] + 1):
            assert f"d{k}f/d{inputs[0]}{k} = " in doc


def _alternating_builds() -> list:
    """(example, save_inputs or nested): ``make test`` runs one of the two per example, in turn,
    ``make test-all`` both."""
    return strategy_matrix(EXAMPLES, lambda name: ["nested"] if name in NESTED_ONLY else ["save_inputs", "nested"])


@pytest.mark.parametrize("name, build", _alternating_builds())
def test_public_function_has_type_hints_and_documents_every_argument(name, build, example_builds):
    """Inputs are tensors, params keyword-only floats with their defaults, the result a tensor; the
    docstring's Args name each (a param with its default) and it has Returns. The formula is
    written once, in the module docstring: the function's docstring does not repeat it."""
    path = example_builds(build, name)
    spec, module = _spec_of(path), import_path(path)
    function = getattr(module, name)
    signature = inspect.signature(function)
    returned = tuple[torch.Tensor, ...] if "outputs" in spec and not spec.get("stack") else torch.Tensor
    assert signature.return_annotation in (returned, str(returned).replace("<class 'torch.Tensor'>", "torch.Tensor"))
    params = spec.get("params") or {}
    assert list(signature.parameters) == [*spec["inputs"], *params]
    for x in spec["inputs"]:
        assert signature.parameters[x].annotation is torch.Tensor
        assert signature.parameters[x].default is inspect.Parameter.empty
    for param, default in params.items():
        parameter = signature.parameters[param]
        assert parameter.annotation is float and parameter.default == default
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    doc = inspect.getdoc(function)
    args = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    documented = [line.split(":")[0].strip() for line in args.splitlines() if not line.startswith("        ")]
    assert documented == [*spec["inputs"], *params], args
    for param, default in params.items():
        assert f"default {float(default)!r}" in " ".join(args.split()), args
    assert "\nReturns:\n    " in doc
    if "outputs" in spec:  # the outputs' formulas, one per line: the second's (the first may be a number)
        second = list(spec["outputs"])[1]
        line = next(line for line in module.__doc__.splitlines() if line.startswith(f"    {second} = "))
        formula = " ".join(line.split(" = ", 1)[1].split())
    elif " = " in module.__doc__.split("\n\n", 1)[0]:
        formula = " ".join(module.__doc__.split("\n\n", 1)[0].split(" = ", 1)[1].split())
    else:  # a spec named for its formula (atan2 of atan2(y, x)): the first line says what it adds
        assert module.__doc__.startswith(f"{spec['name']}(") and "explicit formulas" in module.__doc__
        return
    assert f"= {formula}" not in " ".join(doc.split())
    tree = ast.parse(path.read_text())
    docstrings = [ast.get_docstring(node) or "" for node in ast.walk(tree)
                  if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    assert not [d for d in docstrings if f"= {formula}" in " ".join(d.split())]


class SinhBad(torch.autograd.Function):
    """The tutorial's counter-example: intermediates stashed on ctx, not returned."""

    @staticmethod
    def forward(ctx, x):
        ctx.expx, ctx.expnegx = torch.exp(x), torch.exp(-x)
        return (ctx.expx - ctx.expnegx) / 2

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * (ctx.expx + ctx.expnegx) / 2


def test_the_checks_catch_the_tutorials_counter_example_and_pass_dbgens_sinh():
    import generated

    x = sample((3, 4), -2, 2, seed=0)
    expected = derivative_chain(torch.sinh, [x], 2, seed=1)
    bad = derivative_chain(SinhBad.apply, [x], 2, seed=1)
    good = derivative_chain(generated.sinh, [x], 2, seed=1)
    torch.testing.assert_close(bad[1][0], expected[1][0])  # first order looks right...
    assert not torch.allclose(bad[2][0], expected[2][0])  # ...the second is silently wrong
    torch.testing.assert_close(good[2][0], expected[2][0], rtol=1e-7, atol=1e-10)


def test_functions_skip_apply_argument_binding_outside_transforms_and_not_inside(monkeypatch):
    """Function.apply runs inspect.signature on every call (half a Function's overhead); the
    generated classes do not, and give the same derivatives; under torch.func transforms they go
    through Function.apply, which the transforms need."""
    module = import_path(ROOT / "generated" / "mish.py")
    x = sample((5,), -2, 2, seed=3).requires_grad_()
    expected = derivative_chain(module.mish, [x], 3, seed=1)
    calls = []
    original = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda f, *a, **k: calls.append(f) or original(f, *a, **k))
    actual = derivative_chain(module.mish, [x], 3, seed=1)
    assert not calls, "Function.apply's binding ran"
    for a, e in zip([actual[0], *(g for gs in actual[1:] for g in gs)], [expected[0], *(g for gs in expected[1:] for g in gs)]):
        torch.testing.assert_close(a, e)
    batched = torch.func.vmap(torch.func.grad(lambda v: module.mish(v).sum()))(x.detach()[None])
    assert calls, "under vmap the generated Functions go through Function.apply"
    torch.testing.assert_close(batched[0], torch.autograd.grad(module.mish(x).sum(), x)[0])


@pytest.mark.parametrize("missing", ["_FUNCTORCH_ACTIVE", "_BASE_APPLY", "_WILL_RUN"])
def test_a_torch_without_a_private_query_takes_the_public_path(tmp_path, missing):
    """The generated runtime reads three of torch._C's private APIs (a running transform, the fast
    apply, the engine's plan), each through getattr: where a torch lacks one, the module falls
    back to Function.apply, treats every pass as a transform's and every input as needed, and
    gives the same numbers at every order, under torch.func too."""
    module = import_path(ROOT / "generated" / "atan2.py")
    y = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)
    x = torch.linspace(0.5, 3, 7, dtype=torch.float64, requires_grad=True)
    expected = derivative_chain(module.atan2, [y, x], 2, seed=3)
    grad = torch.func.grad(lambda a, b: module.atan2(a, b).sum())(y.detach(), x.detach())
    setattr(module, missing, None)
    assert_chains_close(derivative_chain(module.atan2, [y, x], 2, seed=3), expected, rtol=0, atol=0)
    torch.testing.assert_close(torch.func.grad(lambda a, b: module.atan2(a, b).sum())(y.detach(), x.detach()), grad)
