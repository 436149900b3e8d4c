"""The generated public function's arguments, on every strategy and fused.

Params are constants: a Python number (int or float; bool refused as in the spec). A tensor passed
as a param was silently used as a constant by 0.3.0 (its gradient dropped, `None`); it is refused
with a TypeError that says how to make it trainable, before any Function runs, eagerly and under
every torch.func transform. Following that advice (the param listed under `inputs`) gives
autograd's gradient at every order.

Inputs are tensors; a Python number beside a tensor input is wrapped as torch's binary ops wrap
one (the tensors' dtype and device, no gradient); numbers alone are refused with a TypeError.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
import yaml
from helpers import assert_chains_close, build_spec, derivative_chain, sample

ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = ["save_inputs", "save_outputs", "intermediates", "nested"]
BUILDS = [*STRATEGIES, "fuse"]
F64 = torch.float64

# the trainable versions of two examples, as the TypeError tells a user to write them
SOFTPLUS_TRAINABLE = {"name": "softplus_trainable", "expr": "log(1 + exp(beta * x)) / beta", "inputs": ["x", "beta"],
                          "order": 3, "domain": {"beta": [0.5, 2.0]}}
LENNARD_JONES_TRAINABLE = {"name": "lennard_jones_trainable", "expr": "4 * epsilon * ((sigma / r)**12 - (sigma / r)**6)",
                               "inputs": ["r", "epsilon", "sigma"], "order": 3,
                               "domain": {"r": [0.9, 2.5], "epsilon": [0.5, 2.0], "sigma": [0.8, 1.2]}}


def _example(name: str) -> dict:
    return yaml.safe_load((ROOT / "specs" / f"{name}.yaml").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(spec, build)``: the spec (a dict) built with strategy ``build``, or fused; cached."""
    cache = {}

    def get(spec: dict, build: str):
        key = (yaml.safe_dump(spec), build)
        if key not in cache:
            variant = dict(spec, fuse=True) if build == "fuse" else dict(spec, strategy=build)
            module = build_spec(tmp_path_factory.mktemp(spec["name"]), **variant)
            cache[key] = getattr(module, spec["name"])
        return cache[key]

    return get


@contextlib.contextmanager
def functions_applied(monkeypatch):
    """The autograd.Function classes applied while the block runs."""
    applied = []
    original = torch.autograd.Function.apply.__func__

    def spy(cls, *args, **kwargs):
        applied.append(cls.__name__)
        return original(cls, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch.autograd.Function, "apply", classmethod(spy))
        yield applied


def _inputs(spec: dict, seed: int = 0, shapes=((3, 4), (4,), ())):
    """Float64 inputs that require grad, drawn from the spec's domain, with broadcasting shapes."""
    domain = spec.get("domain") or {}
    return [sample(shapes[i % len(shapes)], *domain.get(name, (-2.0, 2.0)), seed=seed + i)
            for i, name in enumerate(spec["inputs"])]


def _refusal(function: str, param: str) -> str:
    """What the TypeError must say (a regex): the function, the param, and to list it under inputs."""
    return (rf"^{function}\(\): param '{param}' must be a Python number, not a Tensor: params are constants\. "
            rf"To train {param}, list it under 'inputs' in the spec, rebuild, and pass it as a tensor "
            rf"\(shape \(\) for a scalar\)\.$")


# --- a tensor param is refused ------------------------------------------------------------------

@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("name", ["softplus", "lennard_jones", "gaussian_rbf"])
def test_a_tensor_param_is_refused_before_any_function_runs(name, build, built, monkeypatch):
    spec = _example(name)
    fn = built(spec, build)
    inputs = _inputs(spec)
    defaults = spec["params"]
    for param in defaults:  # each param in turn a tensor, the others numbers
        params = dict(defaults, **{param: torch.tensor(1.5, dtype=F64, requires_grad=True)})
        with functions_applied(monkeypatch) as applied, pytest.raises(TypeError, match=_refusal(name, param)):
            fn(*inputs, **params)
        assert applied == [], f"{applied} ran before the refusal"
    # 0-dim without grad, or a one-element tensor: refused all the same (still not a number)
    for value in (torch.tensor(1.5), torch.tensor([1.5], dtype=F64)):
        with pytest.raises(TypeError, match=_refusal(name, next(iter(defaults)))):
            fn(*inputs, **{next(iter(defaults)): value})


@pytest.mark.parametrize("value", ["1.5", None, [1.5], (1.5,), True, False, 1.5j, object()],
                         ids=["str", "None", "list", "tuple", "True", "False", "complex", "object"])
def test_a_param_that_is_not_a_python_number_is_refused(value, built):
    """bool is refused as the spec refuses `beta: true`: a flag where a number belongs is a mistake."""
    fn = built(_example("softplus"), "save_inputs")
    with pytest.raises(TypeError, match=rf"^softplus\(\): param 'beta' must be a Python number, not {type(value).__name__}$"):
        fn(_inputs(_example("softplus"))[0], beta=value)


def test_numpy_float32_is_refused_and_float64_accepted(built):
    np = pytest.importorskip("numpy")
    fn = built(_example("softplus"), "save_inputs")
    x = _inputs(_example("softplus"))[0]
    with pytest.raises(TypeError, match=r"^softplus\(\): param 'beta' must be a Python number, not float32$"):
        fn(x, beta=np.float32(1.5))
    torch.testing.assert_close(fn(x, beta=np.float64(1.5)), fn(x, beta=1.5), rtol=0, atol=0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_int_and_float_params_give_autograds_derivatives(strategy, built):
    """Accepted params, at a non-default int and float value, at every order, against the formula."""
    spec = _example("lennard_jones")
    fn = built(spec, strategy)
    r = _inputs(spec)[0]

    def reference(r, *, epsilon, sigma):
        return 4 * epsilon * ((sigma / r) ** 12 - (sigma / r) ** 6)

    for params in ({"epsilon": 2, "sigma": 1.1}, {"epsilon": 0.7, "sigma": 1}):
        expected = derivative_chain(reference, [r], spec["order"], seed=3, params=params)
        assert_chains_close(derivative_chain(fn, [r], spec["order"], seed=3, params=params), expected)


@pytest.mark.parametrize("build", BUILDS)
def test_torch_func_transforms_refuse_a_tensor_param(build, built):
    """jvp, grad, vmap and jacrev: the param captured as a tensor, or passed (and vmapped) as one."""
    fn = built(_example("softplus"), build)
    x = sample((5,), -2, 2, seed=0).detach()
    beta = torch.tensor(1.5, dtype=F64)
    betas = torch.tensor([1.5, 2.5], dtype=F64)
    calls = {
        "jvp_captured": lambda: torch.func.jvp(lambda x: fn(x, beta=beta), (x,), (torch.ones_like(x),)),
        "jvp_of_beta": lambda: torch.func.jvp(lambda b: fn(x, beta=b), (beta,), (torch.ones_like(beta),)),
        "grad_captured": lambda: torch.func.grad(lambda x: fn(x, beta=beta).sum())(x),
        "grad_of_beta": lambda: torch.func.grad(lambda b: fn(x, beta=b).sum())(beta),
        "jacrev_of_beta": lambda: torch.func.jacrev(lambda b: fn(x, beta=b))(beta),
        "vmap_captured": lambda: torch.func.vmap(lambda x: fn(x, beta=beta))(x),
        "vmap_over_beta": lambda: torch.func.vmap(lambda b: fn(x, beta=b))(betas),
        "vmap_grad_over_beta": lambda: torch.func.vmap(torch.func.grad(lambda b: fn(x, beta=b).sum()))(betas),
    }
    for label, call in calls.items():
        with pytest.raises(TypeError, match=_refusal("softplus", "beta")):
            call()
            pytest.fail(f"{label}: no TypeError")


@pytest.mark.compile
def test_torch_compile_refuses_a_tensor_param(built):
    """Without fullgraph, Dynamo breaks the graph and the TypeError itself reaches the user. With
    fullgraph=True Dynamo cannot leave a graph by a raise: it raises its own `Unsupported`
    ("Observed exception"), whose text carries the TypeError and its message, and whose cause is
    Dynamo's ObservedTypeError. Number params, changed between calls, stay right under fullgraph."""
    fn = built(_example("softplus"), "save_inputs")
    x = sample((5,), -2, 2, seed=0)
    beta = torch.tensor(1.5, dtype=F64, requires_grad=True)
    torch._dynamo.reset()
    with pytest.raises(TypeError, match=_refusal("softplus", "beta")):
        torch.compile(fn, backend="aot_eager")(x, beta=beta)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported) as caught:
        torch.compile(fn, fullgraph=True, backend="aot_eager")(x, beta=beta)
    assert "softplus(): param 'beta' must be a Python number, not a Tensor" in str(caught.value)
    assert "list it under 'inputs'" in str(caught.value)
    assert type(caught.value.__cause__).__name__ == "ObservedTypeError"
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for value in (1.5, 2.5, 3, 0.75):
        torch.testing.assert_close(compiled(x, beta=value), fn(x, beta=value))


# --- following the advice: the param as an input --------------------------------------------------

@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("spec, reference", [
    (SOFTPLUS_TRAINABLE, lambda x, beta: torch.log1p(torch.exp(beta * x)) / beta),
    (LENNARD_JONES_TRAINABLE, lambda r, epsilon, sigma: 4 * epsilon * ((sigma / r) ** 12 - (sigma / r) ** 6)),
], ids=["softplus", "lennard_jones"])
def test_a_param_made_an_input_has_autograds_gradient_at_every_order(spec, reference, strategy, built):
    """d/dbeta (d/depsilon, d/dsigma) of a shape-() tensor input, orders 1 to 3, all mixed partials."""
    fn = built(spec, strategy)
    inputs = _inputs(spec, seed=11, shapes=((3, 4), (), ()))  # the former params: shape-() tensors
    assert_chains_close(derivative_chain(fn, inputs, spec["order"], seed=5),
                        derivative_chain(reference, inputs, spec["order"], seed=5))
    if spec is SOFTPLUS_TRAINABLE:  # the case: beta = 1.5 gets its gradient, not None
        x = sample((5,), -2, 2, seed=0)
        beta = torch.tensor(1.5, dtype=F64, requires_grad=True)
        (got,) = torch.autograd.grad(fn(x, beta).sum(), beta)
        (want,) = torch.autograd.grad(reference(x, beta).sum(), beta)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


# --- Python numbers as inputs -----------------------------------------------------------------

ATAN2 = _example("atan2")


@pytest.mark.parametrize("build", BUILDS)
def test_a_number_beside_a_tensor_is_a_constant_of_the_tensors_dtype(build, built):
    """atan2(y, 2.0) and atan2(3, x) as torch.atan2 gives them: value, dtype, every order; the number
    gets no gradient (the tensor input's is autograd's)."""
    fn = built(ATAN2, build)
    y = sample((3, 4), -2, 2, seed=0)
    x = sample((4,), 0.5, 2, seed=1)
    for number in (2.0, 2, -0.75):
        expected = derivative_chain(lambda y, number=number: torch.atan2(y, torch.tensor(float(number), dtype=F64)), [y], 2, seed=2)
        assert_chains_close(derivative_chain(lambda y, number=number: fn(y, number), [y], 2, seed=2), expected)
        expected = derivative_chain(lambda x, number=number: torch.atan2(torch.tensor(float(number), dtype=F64), x), [x], 2, seed=2)
        assert_chains_close(derivative_chain(lambda x, number=number: fn(number, x), [x], 2, seed=2), expected)
    y32 = y.detach().float().requires_grad_()
    out = fn(y32, 2.0)
    assert out.dtype == torch.float32 and out.shape == y32.shape
    torch.testing.assert_close(out, torch.atan2(y32, 2.0 * torch.ones(())))
    assert torch.autograd.grad(out.sum(), y32)[0].dtype == torch.float32


@pytest.mark.parametrize("build", BUILDS)
def test_a_number_input_under_torch_func_transforms(build, built):
    fn = built(ATAN2, build)
    y = sample((5,), -2, 2, seed=0).detach()

    def reference(y):
        return torch.atan2(y, torch.tensor(2.0, dtype=F64))

    def ours(y):
        return fn(y, 2.0)

    for transform in (
        torch.func.vmap,
        lambda f: torch.func.vmap(torch.func.grad(f)),
        lambda f: torch.func.jacrev(torch.func.jacrev(f)),
        lambda f: torch.func.hessian(lambda y: f(y).sum()),
        lambda f: (lambda y: torch.func.jvp(f, (y,), (torch.ones_like(y),))),
    ):
        torch.testing.assert_close(transform(ours)(y), transform(reference)(y))


@pytest.mark.compile
def test_a_number_input_under_torch_compile_fullgraph(built):
    fn = built(ATAN2, "save_inputs")
    y = sample((5,), -2, 2, seed=0)
    torch._dynamo.reset()
    constant = torch.compile(lambda y: fn(y, 2.0), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(constant(y), torch.atan2(y, torch.tensor(2.0, dtype=F64)))
    passed = torch.compile(lambda y, number: fn(y, number), fullgraph=True, backend="aot_eager")
    for number in (2.0, 3.0, 0.5):
        value = passed(y, number)
        torch.testing.assert_close(value, torch.atan2(y, torch.tensor(number, dtype=F64)))
        (grad,) = torch.autograd.grad(value.sum(), y)
        torch.testing.assert_close(grad, number / (y.detach() ** 2 + number**2))


def test_numbers_only_are_refused_with_the_way_to_pass_a_tensor(built):
    atan2 = built(ATAN2, "save_inputs")
    softplus = built(_example("softplus"), "save_inputs")
    message = r"^atan2\(\): at least one input must be a tensor, not only Python numbers: pass a tensor, e\.g\. "
    with pytest.raises(TypeError, match=message + r"torch\.tensor\(2\.0\)$"):
        atan2(2.0, 3)
    with pytest.raises(TypeError, match=message + r"torch\.tensor\(1\.0\)$"):
        atan2(1, 0.5)
    for value, shown in ((2.0, "2.0"), (3, "3.0")):
        match = rf"^softplus\(\): input 'x' must be a tensor, not {type(value).__name__}: pass a tensor, e\.g\. torch\.tensor\({shown}\)$"
        with pytest.raises(TypeError, match=match):
            softplus(value)


@pytest.mark.parametrize("value", ["1.5", None, [1.5], True, 1.5j], ids=["str", "None", "list", "bool", "complex"])
def test_an_input_that_is_neither_tensor_nor_number_is_refused(value, built):
    atan2 = built(ATAN2, "save_inputs")
    softplus = built(_example("softplus"), "save_inputs")
    y = sample((5,), -2, 2, seed=0)
    kind = type(value).__name__
    with pytest.raises(TypeError, match=rf"^atan2\(\): input 'x' must be a tensor or a Python number, not {kind}$"):
        atan2(y, value)
    with pytest.raises(TypeError, match=rf"^atan2\(\): input 'y' must be a tensor or a Python number, not {kind}$"):
        atan2(value, y)
    with pytest.raises(TypeError, match=rf"^softplus\(\): input 'x' must be a tensor, not {kind}$"):
        softplus(value)


def test_a_float_number_beside_integer_tensors_is_not_truncated(built):
    """As torch: a float with integer tensors gives the default float dtype, not an int (0.5 -> 0)."""
    fn = built(ATAN2, "save_inputs")
    y = torch.tensor([1, 2, 3])
    torch.testing.assert_close(fn(y, 0.5), torch.atan2(y, torch.tensor(0.5)))


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_arguments_named_like_the_builtins_the_checks_use(strategy, built):
    """Inputs named isinstance and type, a param named float: they shadow the builtins the fast-path
    guards read, and the checks still refuse a tensor param and wrap a number input."""
    spec = {"name": "shadowing", "expr": "float * isinstance * exp(type)", "inputs": ["isinstance", "type"],
                "params": {"float": 1.5}, "order": 2}
    fn = built(spec, strategy)
    a, b = _inputs(spec, shapes=((3, 4), (4,)))

    def reference(a, b, float=1.5):
        return float * a * torch.exp(b)

    for params in ({}, {"float": 2.5}, {"float": 2}):
        assert_chains_close(derivative_chain(fn, [a, b], 2, seed=1, params=params),
                            derivative_chain(reference, [a, b], 2, seed=1, params=params))
    torch.testing.assert_close(fn(a, 0.5), reference(a, torch.tensor(0.5, dtype=F64)))
    with pytest.raises(TypeError, match=_refusal("shadowing", "float")):
        fn(a, b, float=torch.tensor(1.5))
    with pytest.raises(TypeError, match=r"^shadowing\(\): at least one input must be a tensor"):
        fn(1.0, 2.0)
