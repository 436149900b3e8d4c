"""cpp: true — the Functions as C++ autograd code, the op torch.ops.dbgen.NAME: the same numbers as
the Python Functions at every order, from Python, from a TorchScript model saved and loaded in a
fresh process, through torch.export and FakeTensor, a force model exported and compiled by
AOTInductor; refused where it cannot compute a function;
without a compiler the Python Functions run after one warning."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from helpers import build_spec, derivative_chain, run_dbgen, sample

from codegen.build import pipeline
from codegen.errors import SpecErrors

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# two inputs that broadcast, params at other values, a branch on an input, a clamp, several functions
SPEC = {"name": "cpp_mix", "inputs": ["x", "y"], "order": 3, "params": {"a": 0.3, "b": 1.5}, "cpp": True,
        "expr": "where(x > a, exp(-x*y) * sin(b*y), log1p(x**2) * tanh(y)) + clamp(x, -1, 1) * y**2 / b"}
PARAMS = {"a": 0.25, "b": 1.25}


@pytest.fixture(scope="module", params=["nested", "save_inputs", "intermediates"])
def module(request, tmp_path_factory):
    name = f"cpp_mix_{request.param}"
    return build_spec(tmp_path_factory.mktemp(name), **dict(SPEC, name=name, strategy=request.param))


def _inputs(seed: int):
    return [sample((4, 3), -2, 2, seed=seed).requires_grad_(), sample((3,), -2, 2, seed=seed + 1).requires_grad_()]


def _name(module) -> str:
    return next(name for name in vars(module) if name.startswith("cpp_mix_"))


def test_the_public_function_runs_the_cpp_op(module):
    assert module._OP is getattr(torch.ops.dbgen, _name(module))
    x, y = _inputs(0)
    assert type(getattr(module, _name(module))(x, y).grad_fn).__name__ == "CppFunction"  # a C++ autograd node


def test_every_order_equals_the_python_functions(module, monkeypatch):
    function = getattr(module, _name(module))
    inputs = _inputs(1)
    through_op = derivative_chain(function, inputs, 3, 1, PARAMS)
    monkeypatch.setattr(module, "_OP", None)
    in_python = derivative_chain(function, inputs, 3, 1, PARAMS)
    for level, (got, want) in enumerate(zip(through_op, in_python)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=lambda m, k=level: f"order {k}: {m}")


def test_fake_tensors_and_torch_export_see_one_op(module):
    from torch._subclasses.fake_tensor import FakeTensorMode

    name = _name(module)
    op = getattr(torch.ops.dbgen, name)
    with FakeTensorMode() as mode:
        fake = op(mode.from_tensor(torch.ones(4, 3, dtype=torch.float64)), mode.from_tensor(torch.ones(3)), 0.3, 1.5)
    assert fake.shape == (4, 3) and fake.dtype == torch.float64

    class Model(torch.nn.Module):
        def forward(self, x, y):
            return op(x, y, 0.25, 1.25)

    x, y = (t.detach() for t in _inputs(2))
    exported = torch.export.export(Model(), (x, y))
    assert f"torch.ops.dbgen.{name}.default" in exported.graph_module.code
    torch.testing.assert_close(exported.module()(x, y), op(x, y, 0.25, 1.25), rtol=0, atol=0)


FORCE_SPEC = {"name": "morse_pair", "inputs": ["r"], "order": 3, "params": {"d": 1.0, "a": 1.5, "r0": 1.1},
              "domain": {"r": [0.6, 4.0]}, "cpp": True, "expr": "d * (1 - exp(-a * (r - r0)))**2"}

class Forces(torch.nn.Module):
    """Energy and forces of a pair potential, as interatomic models are deployed in TorchScript."""

    def forward(self, positions: torch.Tensor):
        pairs = torch.triu_indices(positions.shape[0], positions.shape[0], 1)
        r = (positions[pairs[0]] - positions[pairs[1]]).pow(2).sum(-1).sqrt()
        energy = torch.ops.dbgen.morse_pair(r, a=1.25).sum()
        forces = torch.autograd.grad([energy], [positions], create_graph=True)[0]
        assert forces is not None
        return energy, -forces


def _second_derivative(model, positions):
    """The energy, the forces and the gradient of the squared forces, flat (as the C++ program prints them)."""
    positions = positions.clone().requires_grad_()
    energy, forces = model(positions)
    (curvature,) = torch.autograd.grad((forces**2).sum(), positions)
    return torch.cat([energy.reshape(1), forces.flatten(), curvature.flatten()]).detach()


class PythonForces(Forces):
    """The same model through the Python Functions: the reference."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, positions):
        pairs = torch.triu_indices(positions.shape[0], positions.shape[0], 1)
        r = (positions[pairs[0]] - positions[pairs[1]]).pow(2).sum(-1).sqrt()
        energy = self.module.morse_pair(r, a=1.25).sum()
        (forces,) = torch.autograd.grad(energy, positions, create_graph=True)
        return energy, -forces


@pytest.fixture(scope="module")
def force_folder(tmp_path_factory):
    """A project with FORCE_SPEC built into out/ (one compile of its op for every test here)."""
    folder = tmp_path_factory.mktemp("forces")
    return folder, build_spec(folder, **FORCE_SPEC)


@pytest.fixture(scope="module")
def force_model(force_folder):
    """(the op's library, the scripted model's file, positions, the Python Functions' numbers)."""
    folder, module = force_folder
    saved = folder / "forces.pt"
    torch.jit.script(Forces()).save(str(saved))
    positions = sample((5, 3), 0, 3, seed=3).detach()
    op, module._OP = module._OP, None
    expected = _second_derivative(PythonForces(module), positions)
    module._OP = op
    return module.OP_LIBRARY, saved, positions, expected


def test_a_scripted_force_model_loads_in_a_fresh_process_with_the_python_forces(force_model, tmp_path):
    library, saved, positions, expected = force_model
    torch.save(positions, tmp_path / "positions.pt")
    script = textwrap.dedent(f"""
        import torch
        torch.ops.load_library({library!r})
        model = torch.jit.load({str(saved)!r})
        positions = torch.load({str(tmp_path / 'positions.pt')!r}).requires_grad_()
        energy, forces = model(positions)
        (curvature,) = torch.autograd.grad((forces**2).sum(), positions)
        got = torch.cat([energy.reshape(1), forces.flatten(), curvature.flatten()]).detach()
        torch.save(got, {str(tmp_path / 'got.pt')!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    torch.testing.assert_close(torch.load(tmp_path / "got.pt"), expected, rtol=1e-12, atol=1e-12)


class ExportableForces(torch.nn.Module):
    """The force model as torch.export (2.13, non-strict) can trace it: torch.autograd.grad through
    indexing, sqrt or norm leaves a fake tensor among the exported constants, so the pairs are a
    mask over all distances and the square root a power."""

    def forward(self, positions: torch.Tensor, upper: torch.Tensor):
        squares = (positions.unsqueeze(0) - positions.unsqueeze(1)).pow(2).sum(-1)
        r = (squares + (1 - upper)).pow(0.5)  # 1 off the pairs, lest the power's derivative be inf at 0
        energy = (torch.ops.dbgen.morse_pair(r, a=1.25) * upper).sum()
        (forces,) = torch.autograd.grad(energy, positions, create_graph=True)
        return energy, -forces


def _exported_forces(positions):
    """The force model through torch.export (non-strict: strict export refuses torch.autograd.grad)."""
    upper = torch.ones(positions.shape[0], positions.shape[0], dtype=positions.dtype).triu(1)
    return torch.export.export(ExportableForces(), (positions.clone().requires_grad_(), upper), strict=False), upper


def test_torch_export_of_the_force_model_gives_the_python_energy_and_forces(force_model):
    _, _, positions, expected = force_model
    exported, upper = _exported_forces(positions)
    code = exported.graph_module.code
    assert "torch.ops.dbgen.morse_pair.default" in code  # the energy: one node
    assert "torch.ops.aten.expm1.default" in code  # the forces: the C++ backward's ATen ops, traced
    energy, forces = exported.module()(positions.clone().requires_grad_(), upper)
    got = torch.cat([energy.reshape(1), forces.flatten()]).detach()
    torch.testing.assert_close(got, expected[: got.numel()], rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_torch_compile_of_the_force_model_gives_the_python_energy_and_forces(force_model):
    """Dynamo stops its graph at torch.autograd.grad, which runs eagerly through the op's C++
    backward; a double backward through a compiled region torch.compile refuses for any function
    (documented)."""
    _, _, positions, expected = force_model
    upper = torch.ones(positions.shape[0], positions.shape[0], dtype=positions.dtype).triu(1)
    energy, forces = torch.compile(ExportableForces())(positions.clone().requires_grad_(), upper)
    got = torch.cat([energy.reshape(1), forces.flatten()]).detach()
    torch.testing.assert_close(got, expected[: got.numel()], rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_an_aotinductor_package_of_the_force_model_runs_without_the_op_library(force_model, tmp_path):
    """AOTInductor compiles the op's forward and backward formulas into its own kernels: a fresh
    process that never loads OP_LIBRARY runs the package and gives the Python energy and forces."""
    _, _, positions, expected = force_model
    exported, upper = _exported_forces(positions)
    package = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "forces.pt2"))
    torch.save((positions, upper), tmp_path / "inputs.pt")
    script = textwrap.dedent(f"""
        import torch
        model = torch._inductor.aoti_load_package({package!r})
        positions, upper = torch.load({str(tmp_path / 'inputs.pt')!r})
        energy, forces = model(positions.requires_grad_(), upper)
        assert not hasattr(torch.ops.dbgen, "morse_pair")
        torch.save(torch.cat([energy.reshape(1), forces.flatten()]).detach(), {str(tmp_path / 'got.pt')!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    got = torch.load(tmp_path / "got.pt")
    torch.testing.assert_close(got, expected[: got.numel()], rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_a_cpp_program_runs_the_scripted_force_model_with_the_python_forces(force_model, tmp_path):
    """tests/fixtures/cpp/forces.cpp, built against the installed libtorch: dlopen the op's library,
    torch::jit::load the model, forces and a second derivative through torch::autograd::grad. Then
    as a host that knows nothing of dbgen (LAMMPS's pair styles): the library through LD_PRELOAD."""
    from torch.utils import cpp_extension

    library, saved, positions, expected = force_model
    program = tmp_path / "forces"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    command = ["c++", "-std=c++17", "-O1", str(FIXTURES / "cpp" / "forces.cpp"), "-o", str(program),
               f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{path}" for path in cpp_extension.include_paths()),
               *(f"-L{path}" for path in cpp_extension.library_paths()),
               *(f"-Wl,-rpath,{path}" for path in cpp_extension.library_paths()),
               "-ltorch", "-ltorch_cpu", "-lc10", "-ldl"]
    subprocess.run(command, check=True, timeout=600)
    (tmp_path / "positions.txt").write_text("\n".join(repr(v) for v in positions.flatten().tolist()))
    preloaded = {**os.environ, "LD_PRELOAD": library, "LD_LIBRARY_PATH": ":".join(cpp_extension.library_paths())}
    for argument, env in ((library, None), ("-", preloaded)):
        run = subprocess.run([str(program), argument, str(saved), str(tmp_path / "positions.txt")],
                             check=True, capture_output=True, text=True, timeout=300, env=env)
        got = torch.tensor([float(line) for line in run.stdout.split()], dtype=torch.float64)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.quint8])
def test_the_op_refuses_what_the_python_function_refuses(force_folder, dtype):
    """Called directly (TorchScript, C++), the op kept a complex input's real part (with a warning)."""
    _, module = force_folder
    values = torch.tensor([1.5, 2.0], dtype=torch.float32)
    tensor = torch.quantize_per_tensor(values, 0.1, 0, dtype) if dtype == torch.quint8 else values.to(dtype)
    with pytest.raises(TypeError) as python:
        module.morse_pair(tensor)
    with pytest.raises(TypeError) as op:
        torch.ops.dbgen.morse_pair(tensor)
    # the two messages are twins (the template's and the runtime's): equal but for the dtype's spelling
    def without_dtype(message):
        return re.sub(r", not \w+:", ", not DTYPE:", message)

    assert without_dtype(str(op.value)) == without_dtype(str(python.value))
    assert str(python.value).startswith("morse_pair(): input 'r' must be a")


def test_the_op_converts_integer_and_bool_tensors_as_the_python_function_does(force_folder):
    _, module = force_folder
    for tensor in (torch.tensor([1, 2, 3]), torch.tensor([True, False])):
        torch.testing.assert_close(torch.ops.dbgen.morse_pair(tensor), module.morse_pair(tensor))


def test_without_a_compiler_the_python_functions_run_after_one_warning(force_folder, monkeypatch):
    _, module = force_folder
    monkeypatch.setenv("CXX", "no-such-compiler")
    with pytest.warns(UserWarning, match=r"no C\+\+ compiler \(no-such-compiler\)"):
        op, path = module._load_op("morse_no_compiler", module._OP_SOURCE)
    assert op is None and path is None
    monkeypatch.setattr(module, "_OP", None)
    r = sample((6,), 0.6, 4.0, seed=4).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (grad,) = torch.autograd.grad(module.morse_pair(r).sum(), r)
    torch.testing.assert_close(grad, 2 * 1.5 * torch.exp(-1.5 * (r - 1.1)) * (1 - torch.exp(-1.5 * (r - 1.1))))


def test_a_source_that_does_not_compile_falls_back_saying_the_compilers_error(force_folder):
    _, module = force_folder
    with pytest.warns(UserWarning, match=r"building it failed: .*error: .*not_a_type"):
        op, path = module._load_op("morse_broken_source_again", "not_a_type x;\n")
    assert op is None and path is None


@pytest.mark.parametrize(("extra", "message"), [
    ({"expr": "bessel_j0(x) * x"}, "cpp: true cannot compute bessel_j0 in C++ yet"),
    ({"expr": "sinh(x)", "fuse": True}, "cpp: true cannot be used with fuse: true"),
    ({"expr": "sinh(x) * double", "params": "{double: 2.0}"}, "'double': it is a C++ keyword"),
    ({"expr": "sinh(x) * EOF", "params": "{EOF: 2.0}"}, "'EOF': it is a macro of the C++ headers the op includes"),
])
def test_what_the_cpp_op_cannot_compute_is_refused_on_the_cpp_line(tmp_path, extra, message):
    spec = tmp_path / "refused.yaml"
    text = {"name": "refused", "inputs": ["x"], "order": 2, **extra, "cpp": True}
    spec.write_text("".join(f"{key}: {value if not isinstance(value, bool) else str(value).lower()}\n"
                            for key, value in text.items()).replace("['x']", "[x]"))
    with pytest.raises(SpecErrors) as refused:
        pipeline.generate(spec, root=tmp_path)
    (problem,) = refused.value.problems
    assert message in problem.message and problem.line == len(text)


def test_the_generated_tests_of_a_cpp_spec_pass_right_after_the_build(force_folder):
    """Among them the op's own check: every order against the Python Functions."""
    folder, _ = force_folder
    tests = folder / "out" / "tests" / "test_morse_pair.py"
    assert "def test_cpp_op" in (folder / "out" / "tests" / "_dbgen_checks.py").read_text()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                         check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "test_cpp_op_matches_the_python_functions_at_every_order" in subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(tests)],
        check=True, capture_output=True, text=True, timeout=600).stdout


# every construct the C++ printer writes (aten.py): params' choices (?:), masks, clamps, where, special
# functions, the norm helper, erfcx, a series branch (Horner) near a removable singularity
CONSTRUCTS = [
    {"name": "cpp_constructs", "inputs": ["x", "y"], "params": {"a": 0.7}, "order": 2, "cpp": True,
     "domain": {"x": [-2, 2], "y": [0.5, 2]},
     "outputs": {
         "angles": "atan2(x, y) * sqrt(x**2 + y**2)",
         "sums": "log(exp(x) + exp(y)) + xlogy(x**2, y**2 + 1)",
         "gammas": "erfinv(tanh(x)/2) + lgamma(y**2 + 1) + digamma(x**2 + 2) + polygamma(1, y**2 + 1)",
         "choices": "where(x > a, abs(x)**a, 1/(1 + x**2)) + clamp(x, -a, a) * relu(y) + max(x, y) * min(x, 0.5)",
         "removable": "sin(x)/x + expm1(y)/y",
         "tails": "log(cosh(x - y)) + exp(-x**2) * erfc(y) + softplus(a*x) * sigmoid(y) + where(x > 0, y**3, -y**3)",
         "roots": "(x**2 + 1)**(1/3) * exp(a) + asinh(x) * atan(y) + erf(x*y) + cos(a*y)**2"}},
    {"name": "cpp_more_constructs", "inputs": ["x", "y", "z"], "order": 2, "cpp": True,
     "domain": {"x": [-2, 2], "y": [0.5, 2], "z": [-2, 2]},
     "outputs": {"distance": "sqrt(x**2 + y**2 + z**2)", "probit": "log(erfc(-x/sqrt(2))/2)",
                 "removable": "(1 - cos(x))/x**2 + (exp(z) - 1 - z)/z**2"}},
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", CONSTRUCTS, ids=lambda spec: spec["name"])
def test_every_construct_of_the_cpp_printer_gives_the_python_functions_numbers(tmp_path, spec, monkeypatch):
    module = build_spec(tmp_path, **spec)
    assert module._OP is not None
    function = getattr(module, spec["name"])
    inputs = [sample((40,), *spec["domain"][name], seed=i).requires_grad_() for i, name in enumerate(spec["inputs"])]
    for params in ({}, *(({"a": 1.3}, {"a": -0.4}) if "params" in spec else ())):
        through_op = derivative_chain(function, inputs, 2, 5, params)
        monkeypatch.setattr(module, "_OP", None)
        in_python = derivative_chain(function, inputs, 2, 5, params)
        monkeypatch.undo()
        for level, (got, want) in enumerate(zip(through_op, in_python)):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=lambda m, k=level: f"order {k}: {m}")


# C++ names the op's source uses or includes, which a value may still take (cpp_names.py refuses the rest)
USED_NAMES = ["compute", "apply", "forward", "at", "std", "c10", "m", "int64_t", "main", "vector", "Function"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["nested", "save_inputs"])
def test_values_named_as_the_op_source_names_things_compile_and_give_the_python_numbers(tmp_path, strategy,
                                                                                       monkeypatch):
    """A param named compute shadowed the Function's own compute (called unqualified): the op did not build."""
    name = f"named_{strategy}"
    spec = {"name": name, "inputs": ["x"], "order": 2, "cpp": True, "strategy": strategy,
            "params": {p: 0.1 * (i + 1) for i, p in enumerate(USED_NAMES)},
            "expr": f"exp(-compute * x**2) * ({' + '.join(USED_NAMES)}) + sin(at * x)"}
    module = build_spec(tmp_path, **spec)
    assert module._OP is not None
    inputs = [sample((30,), -2, 2, seed=4).requires_grad_()]
    other = {"compute": 0.7, "at": -1.3}
    through_op = derivative_chain(getattr(module, name), inputs, 2, 1, other)
    monkeypatch.setattr(module, "_OP", None)
    in_python = derivative_chain(getattr(module, name), inputs, 2, 1, other)
    for got, want in zip(through_op, in_python):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _project(tmp_path, table: str = "", **spec) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "pyproject.toml").write_text(f"[tool.dbgen]\n{table}")
    return tmp_path


def test_cpp_for_every_spec_from_the_command_line_or_the_table(tmp_path):
    """--cpp and cpp = true under [tool.dbgen] set cpp: true on every spec; --no-cpp wins over the
    table; check compares with the same option (a module built with it is current)."""
    project = _project(tmp_path, "cpp = true\n", name="cubic", expr="x**3 - x", inputs=["x"], order=2)
    run = run_dbgen(["build"], cwd=project)
    assert run.returncode == 0, run.stderr
    assert '_OP_SOURCE = r"""' in (project / "generated" / "cubic.py").read_text()
    assert run_dbgen(["check"], cwd=project).returncode == 0
    assert run_dbgen(["check", "--no-cpp"], cwd=project).returncode == 1
    run = run_dbgen(["build", "--no-cpp"], cwd=project)
    assert run.returncode == 0 and "_OP_SOURCE" not in (project / "generated" / "cubic.py").read_text()


def test_cpp_for_a_spec_it_cannot_compute_is_refused_naming_the_option(tmp_path):
    project = _project(tmp_path, name="bessel", expr="bessel_j0(x)", inputs=["x"], order=2)
    run = run_dbgen(["build", "--cpp"], cwd=project)
    assert run.returncode == 2
    assert "specs/bessel.yaml:1: cpp: true cannot compute bessel_j0" in run.stderr
    assert "build this spec without --cpp (or cpp in [tool.dbgen])" in run.stderr


@pytest.mark.parametrize("compiler", ["c++", "no-such-compiler"])
def test_build_compile_prints_each_library_or_exits_1_with_why(tmp_path, compiler):
    project = _project(tmp_path, name=f"quartic_{compiler.replace('-', '_').strip('+_')}", expr="x**4 - x",
                       inputs=["x"], order=2, cpp=True)
    run = run_dbgen(["build", "--compile"], cwd=project, env={**os.environ, "CXX": compiler})
    if compiler == "c++":
        assert run.returncode == 0, run.stderr
        library = re.search(r"C\+\+ op compiled: (\S+\.so)", run.stdout).group(1)
        assert Path(library).is_file()
    else:
        assert run.returncode == 1
        assert "the C++ op could not be built: " in run.stderr and "no C++ compiler (no-such-compiler)" in run.stderr


def test_the_op_runs_no_more_kernels_than_the_python_functions(module, monkeypatch):
    """A deterministic count of the ATen ops a third-order chain dispatches: ATen's C++ operators
    with a number on the left (1 - t) take three kernels where Python's take one, so the printer
    avoids them (aten.py); a nested level's placeholder for a gradient left out is one empty tensor."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    function = getattr(module, _name(module))
    counts = {}
    for path in ("cpp", "python"):
        if path == "python":
            monkeypatch.setattr(module, "_OP", None)
        with Count() as counted:
            derivative_chain(function, _inputs(6), 3, 6, PARAMS)
        counts[path] = [op for op in counted.ops if op != "aten.empty.memory_format"]
    extra = collections.Counter(counts["cpp"]) - collections.Counter(counts["python"])
    fewer = collections.Counter(counts["python"]) - collections.Counter(counts["cpp"])
    assert len(counts["cpp"]) <= len(counts["python"]), (extra, fewer)
