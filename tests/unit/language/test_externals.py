"""External functions (docs/guide/externals.md): SciPy's special functions and a spec's declared
externs, generated nested, checked against mpmath and finite differences; the order limit; the
CPU round trip; vmap; a declared extern trained end to end; what is refused and how."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import textwrap

import mpmath
import pytest
import sympy
import torch
from helpers import build_spec, import_path
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.build import pipeline, write
from codegen.language import external
from codegen.language.expr import parse_expr

x = sympy.Symbol("x", real=True)

# Each SciPy function: the value of its first argument (None: it has one argument) and points of
# its domain where it and its derivatives are smooth.
CASES = {
    "jv": (2.5, [0.7, 3.1]), "yv": (1.5, [0.8, 4.0]), "iv": (0.5, [0.6, 2.5]), "kv": (1.5, [0.4, 3.0]),
    "ive": (1, [-2.0, 1.2]), "kve": (0.5, [0.5, 3.0]), "expi": (None, [-1.5, 0.7, 2.0]),
    "expn": (2, [0.5, 2.0]), "gammainc": (2.5, [0.6, 3.0]), "gammaincc": (1.5, [0.6, 3.0]),
    "lambertw": (None, [-0.2, 0.5, 3.0]), "zeta": (3, [0.5, 2.0]), "fresnel_s": (None, [0.3, 1.7]),
    "fresnel_c": (None, [0.3, 1.7]), "airy_ai": (None, [-1.5, 0.8]), "airy_ai_prime": (None, [-1.5, 0.8]),
    "airy_bi": (None, [-1.5, 0.8]), "airy_bi_prime": (None, [-1.5, 0.8]), "struve": (1.5, [0.7, 3.0]),
    "ellipk": (None, [0.1, 0.6]), "ellipe": (None, [0.2, 0.7]),
}
# The same functions by mpmath, written here again (an independent reference for the table).
MPMATH = {
    "jv": mpmath.besselj, "yv": mpmath.bessely, "iv": mpmath.besseli, "kv": mpmath.besselk,
    "ive": lambda n, t: mpmath.besseli(n, t) * mpmath.exp(-abs(t)), "kve": lambda n, t: mpmath.besselk(n, t) * mpmath.exp(t),
    "expi": mpmath.ei, "expn": mpmath.expint, "gammainc": lambda a, t: mpmath.gammainc(a, 0, t, regularized=True),
    "gammaincc": lambda a, t: mpmath.gammainc(a, t, mpmath.inf, regularized=True), "lambertw": mpmath.lambertw,
    "zeta": mpmath.zeta, "fresnel_s": mpmath.fresnels, "fresnel_c": mpmath.fresnelc, "airy_ai": mpmath.airyai,
    "airy_ai_prime": lambda t: mpmath.airyai(t, derivative=1), "airy_bi": mpmath.airybi,
    "airy_bi_prime": lambda t: mpmath.airybi(t, derivative=1), "struve": mpmath.struveh, "ellipk": mpmath.ellipk,
    "ellipe": mpmath.ellipe,
}


def test_the_table_is_the_contracts_list():
    assert sorted(external.SCIPY) == sorted(CASES) == sorted(MPMATH)


def _text(name: str, argument: str = "x") -> str:
    constant = CASES[name][0]
    return f"{name}({argument})" if constant is None else f"{name}({constant}, {argument})"


def _mpmath_derivative(name: str, k: int, t: float) -> float:
    constant = CASES[name][0]
    function = MPMATH[name] if constant is None else (lambda u: MPMATH[name](constant, u))
    with mpmath.workdps(40):
        value = mpmath.diff(function, mpmath.mpf(t), k)
    return float(mpmath.re(value))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_derivative_of_the_table_matches_mpmath_to_order_four(name):
    """The table's derivative formulas, differentiated by SymPy and evaluated at 30 digits, are
    mpmath's numerical derivatives of the function itself."""
    formula = parse_expr(_text(name), ("x",), ())
    for t in CASES[name][1]:
        for k in range(5):
            derivative = formula.diff(x, k).replace(sympy.DiracDelta, lambda *args: 0)  # sign(x)' away from 0
            got = float(sympy.re(derivative.subs(x, sympy.Float(t, 30)).evalf(30)))
            assert got == pytest.approx(_mpmath_derivative(name, k, t), rel=1e-12, abs=1e-14), (name, k, t)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_generated_scipy_call_is_the_function(name):
    """What the generated module runs (``call``, on scipy.special) gives the table's value."""
    special = pytest.importorskip("scipy.special")
    cls = external.SCIPY[name]
    run = eval(f"lambda special, {', '.join(cls.params)}: {cls.call}")
    constant = CASES[name][0]
    for t in CASES[name][1]:
        got = run(special, t) if constant is None else run(special, constant, t)
        assert float(got) == pytest.approx(_mpmath_derivative(name, 0, t), rel=1e-12), (name, t)


def _summed(fn):
    return lambda *args: fn(*args).sum()


def _chain(fn, inputs, order):
    """[value, f', f'', ...] of an elementwise function of one input (sums as cotangents)."""
    values = [fn(*inputs)]
    for _ in range(order):
        (grad,) = torch.autograd.grad(values[-1].sum(), inputs[:1], create_graph=True)
        values.append(grad)
    return values


def _scipy_module(tmp_path, name: str, order: int):
    lo, hi = min(CASES[name][1]), max(CASES[name][1])
    return build_spec(tmp_path, name="f", expr=_text(name), inputs=["x"], order=order, domain={"x": [lo, hi]})


def _check_against_mpmath(module, name: str, order: int) -> None:
    points = torch.tensor(CASES[name][1], dtype=torch.float64, requires_grad=True)
    for k, values in enumerate(_chain(module.f, [points], order)):
        want = torch.tensor([_mpmath_derivative(name, k, t) for t in CASES[name][1]], dtype=torch.float64)
        torch.testing.assert_close(values.detach(), want, rtol=1e-9, atol=1e-12, msg=lambda m, k=k: f"order {k}: {m}")


QUICK = ["jv", "kv", "expi", "lambertw"]


@pytest.mark.parametrize("name", QUICK)
def test_a_generated_scipy_function_matches_mpmath_to_its_order_then_raises(tmp_path, name):
    pytest.importorskip("scipy.special")
    module = _scipy_module(tmp_path, name, 3)
    _check_against_mpmath(module, name, 3)
    point = torch.tensor(CASES[name][1], dtype=torch.float64, requires_grad=True)
    third = _chain(module.f, [point], 3)[-1]
    with pytest.raises(RuntimeError) as raised:
        torch.autograd.grad(third.sum(), point)
    assert str(raised.value) == ("f: derivatives above order 3 are not generated; set `order: 4` in specs/f.yaml "
                                 "and run `dbgen build`")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CASES) - set(QUICK)))
def test_every_generated_scipy_function_matches_mpmath_to_its_order(tmp_path, name):
    pytest.importorskip("scipy.special")
    _check_against_mpmath(_scipy_module(tmp_path, name, 2), name, 2)


@pytest.mark.parametrize("order", [1, 2])
def test_the_error_comes_exactly_at_order_plus_one(tmp_path, order):
    """expi's derivatives are torch ops (exp(x)/x), so autograd could go past the order here; it
    raises all the same, at exactly order + 1, as for every spec that calls an external function."""
    pytest.importorskip("scipy.special")
    module = build_spec(tmp_path, name="ei", expr="expi(x)", inputs=["x"], order=order, domain={"x": [0.5, 3]})
    point = torch.tensor([0.7, 1.9], dtype=torch.float64, requires_grad=True)
    chain = _chain(module.ei, [point], order)
    want = [_mpmath_derivative("expi", order, t) for t in (0.7, 1.9)]
    torch.testing.assert_close(chain[-1].detach(), torch.tensor(want, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=f"derivatives above order {order} are not generated; set `order: "
                                           f"{order + 1}`"):
        torch.autograd.grad(chain[-1].sum(), point)
    nested = _summed(module.ei)
    for _ in range(order + 1):
        nested = _summed(torch.func.grad(nested))
    with pytest.raises(RuntimeError, match=f"derivatives above order {order}"):  # under torch.func too
        nested(point.detach())


def test_a_plain_last_backward_keeps_no_graph(tmp_path):
    """The order limit costs nothing in a training step's plain backward (no create_graph)."""
    pytest.importorskip("scipy.special")
    module = build_spec(tmp_path, name="ei", expr="expi(x)", inputs=["x"], order=1, domain={"x": [0.5, 3]})
    point = torch.tensor([0.7, 1.9], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(module.ei(point).sum(), point)
    assert grad.grad_fn is None and not grad.requires_grad


def test_a_module_without_scipy_functions_never_imports_it(tmp_path):
    build_spec(tmp_path, name="plain", expr="bessel_j0(x) * x", inputs=["x"], order=2)
    text = (tmp_path / "out" / "plain.py").read_text()
    assert "scipy" not in text and "_External" not in text


def test_a_missing_scipy_is_reported_with_how_to_install_it(tmp_path, monkeypatch):
    module = build_spec(tmp_path, name="j", expr="jv(2, x)", inputs=["x"], order=1, domain={"x": [0.5, 3]})
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    with pytest.raises(ImportError, match=r"j calls scipy.special \(jv\), and SciPy is not installed: pip install "
                                          r"scipy$"):
        module.j(torch.tensor([1.0]))


def test_inputs_keep_their_dtype_and_numbers_alone_give_numbers(tmp_path):
    pytest.importorskip("scipy.special")
    module = build_spec(tmp_path, name="j", expr="jv(nu, x) + jv(nu, 1.5)", inputs=["x"], params={"nu": 2.0},
                        order=1, domain={"x": [0.5, 3]})
    value = module.j(torch.tensor([1.0, 2.0], dtype=torch.float32))
    assert value.dtype == torch.float32
    want = [float(mpmath.besselj(2, t) + mpmath.besselj(2, 1.5)) for t in (1.0, 2.0)]
    torch.testing.assert_close(value, torch.tensor(want, dtype=torch.float32))
    assert module._jv(2.0, 1.5) == pytest.approx(float(mpmath.besselj(2, 1.5)))


def test_vmap_batches_one_input_against_another_of_lower_rank(tmp_path):
    """The external call's vmap rule: the batched argument's batch dimension moved first and
    padded, so that it broadcasts against an unbatched one of another rank."""
    pytest.importorskip("scipy.special")
    module = build_spec(tmp_path, name="jb", expr="jv(1, x * y)", inputs=["x", "y"], order=2,
                        domain={"x": [0.5, 2], "y": [0.5, 2]})
    xs = torch.linspace(0.5, 2.0, 8, dtype=torch.float64).reshape(4, 2)
    y = torch.tensor([[0.6], [1.1], [1.7]], dtype=torch.float64)
    batched = torch.func.vmap(module.jb, in_dims=(0, None))(xs, y)
    looped = torch.stack([module.jb(row, y) for row in xs])
    torch.testing.assert_close(batched, looped)
    hessians = torch.func.vmap(torch.func.hessian(lambda a, b: module.jb(a, b).sum()), in_dims=(0, None))(xs, y)
    assert hessians.shape == (4, 2, 2)


# --- declared externs ----------------------------------------------------------------------------

KERNELS = '''
import numpy as np
import torch


def softplus(u):
    a = u.detach().cpu().double().numpy()
    return torch.from_numpy(np.maximum(a, 0) + np.log1p(np.exp(-np.abs(a)))).to(u)


def sigmoid(u):
    a = u.detach().cpu().double().numpy()
    e = np.exp(-np.abs(a))
    return torch.from_numpy(np.where(a >= 0, 1 / (1 + e), e / (1 + e))).to(u)


def wrong_sigmoid(u):
    return sigmoid(u) * 1.01


def logaddexp(u, v):
    return torch.from_numpy(np.logaddexp(u.cpu().numpy(), v.cpu().numpy())).to(u.dtype)
'''
EXTERN = {
    "np_softplus": {"impl": "dbgen_test_kernels:softplus", "args": ["u"], "derivatives": ["np_sigmoid(u)"]},
    "np_sigmoid": {"impl": "dbgen_test_kernels:sigmoid", "args": ["u"],
                   "derivatives": ["np_sigmoid(u) * (1 - np_sigmoid(u))"]},
}


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A NumPy module of the user's, importable as dbgen_test_kernels."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "dbgen_test_kernels.py").write_text(textwrap.dedent(KERNELS))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "dbgen_test_kernels", raising=False)
    return folder


def test_a_declared_extern_matches_torchs_own_function_to_order_three_then_raises(tmp_path, kernels):
    module = build_spec(tmp_path, name="sp", expr="np_softplus(beta * x) / beta", inputs=["x"],
                        params={"beta": 2.0}, order=3, extern=EXTERN)
    point = torch.linspace(-3, 3, 7, dtype=torch.float64, requires_grad=True)
    ours = _chain(lambda t: module.sp(t, beta=1.5), [point], 3)
    torch_own = _chain(lambda t: torch.nn.functional.softplus(1.5 * t) / 1.5, [point], 3)
    for k, (got, want) in enumerate(zip(ours, torch_own)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14, msg=lambda m, k=k: f"order {k}: {m}")
    with pytest.raises(RuntimeError, match="sp: derivatives above order 3 are not generated"):
        torch.autograd.grad(ours[-1].sum(), point)


def test_a_declared_extern_is_imported_when_first_called_not_when_built(tmp_path, kernels):
    spec = {"name": "sp", "expr": "np_softplus(x)", "inputs": ["x"], "order": 1, "extern": EXTERN}
    import yaml

    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "sp.yaml").write_text(yaml.safe_dump(spec))
    write.write_files(tmp_path / "out", pipeline.generate(tmp_path / "specs", root=tmp_path))
    assert "dbgen_test_kernels" not in sys.modules  # the build did not import it
    module = import_path(tmp_path / "out" / "sp.py")
    assert "dbgen_test_kernels" not in sys.modules  # nor did importing the generated module
    module.sp(torch.tensor([0.5]))
    assert "dbgen_test_kernels" in sys.modules


def test_an_extern_whose_module_is_missing_fails_at_import_naming_the_spec(tmp_path):
    extern = {"g": {"impl": "no_such_package.kernels:g", "args": ["u"], "derivatives": ["g(u)"]}}
    with pytest.raises(ImportError, match=r"specs/gx.yaml: extern g: no module named 'no_such_package.kernels' "
                                          r"\(impl: no_such_package.kernels:g\); install it or put it on sys.path"):
        build_spec(tmp_path, name="gx", expr="g(x)", inputs=["x"], order=1, extern=extern)


def test_an_extern_whose_callable_is_missing_fails_at_the_first_call(tmp_path, kernels):
    extern = {"g": {"impl": "dbgen_test_kernels:nothing", "args": ["u"], "derivatives": ["g(u)"]}}
    module = build_spec(tmp_path, name="gx", expr="g(x)", inputs=["x"], order=1, extern=extern)
    with pytest.raises(ImportError, match="specs/gx.yaml: extern g: module 'dbgen_test_kernels' has no 'nothing'"):
        module.gx(torch.tensor([1.0]))


def test_the_generated_tests_catch_a_derivative_the_implementation_disagrees_with(tmp_path, kernels):
    """A declared derivative that is not the implementation's (sigmoid declared for a softplus
    whose sigmoid is 1 % off) fails the generated tests' difference quotients and gradcheck."""
    wrong = {**EXTERN, "np_sigmoid": {**EXTERN["np_sigmoid"], "impl": "dbgen_test_kernels:wrong_sigmoid"}}
    build_spec(tmp_path, name="spw", expr="np_softplus(x)", inputs=["x"], order=2, extern=wrong)
    tests = import_path(tmp_path / "out" / "tests" / "test_spw.py")
    with pytest.raises(AssertionError):
        tests.test_each_order_is_the_difference_quotient_of_the_one_below(1)
    with pytest.raises(Exception):  # noqa: B017 - gradcheck raises GradcheckError
        tests.test_gradcheck({})


def test_a_declared_extern_trains_a_parameter_through_a_gradient_penalty(tmp_path, kernels):
    """From a spec to a trained parameter: w in np_softplus(w * x) fitted to data and to its
    slope in x (a loss on the first derivative: backward goes through the second level)."""
    module = build_spec(tmp_path, name="fit", expr="np_softplus(w * x)", inputs=["x", "w"], order=2, extern=EXTERN)
    points = torch.linspace(-2, 2, 64, dtype=torch.float64, requires_grad=True)
    target_w = 1.7
    target = torch.nn.functional.softplus(target_w * points).detach()
    target_slope = (target_w * torch.sigmoid(target_w * points)).detach()
    w = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([w], lr=0.05)
    for _ in range(300):
        optimizer.zero_grad()
        value = module.fit(points, w)
        (slope,) = torch.autograd.grad(value.sum(), points, create_graph=True)
        loss = ((value - target) ** 2).mean() + ((slope - target_slope) ** 2).mean()
        loss.backward()
        optimizer.step()
    assert w.item() == pytest.approx(target_w, abs=1e-3)


def test_a_declared_externs_generated_tests_pass(tmp_path, kernels):
    """Externs of one and two arguments, derivatives in the language's torch functions (exp: the
    test file imports torch for them) and in other externs."""
    lae = {"impl": "dbgen_test_kernels:logaddexp", "args": ["u", "v"],
           "derivatives": ["exp(u - np_lae(u, v))", "exp(v - np_lae(u, v))"]}
    build_spec(tmp_path, name="sp2", expr="np_softplus(x * y) + x * np_sigmoid(y) + np_lae(x, 2 * y)",
               inputs=["x", "y"], order=3, extern={**EXTERN, "np_lae": lae})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(kernels), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                            cwd=tmp_path / "out", env=env, capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, result.stdout[-3000:]


# --- random specs ----------------------------------------------------------------------------

# SciPy functions that are smooth for arguments in [0.25, 5] (what the random specs below give)
ON_POSITIVE = ["jv(1, {})", "jv(2.5, {})", "iv(0, {})", "kv(0.5, {})", "kve(1.5, {})", "expi({})", "expn(1, {})",
               "gammainc(2.5, {})", "lambertw({})", "zeta(2, {})", "fresnel_s({})", "airy_ai({})", "struve(1, {})"]
TORCH_PARTS = ["x", "sin(x)", "exp(-x)", "log(x)", "x**2"]


@settings(max_examples=8, deadline=None)
@given(first=st.sampled_from(ON_POSITIVE), second=st.sampled_from(ON_POSITIVE),
       torch_part=st.sampled_from(TORCH_PARTS), scale=st.sampled_from(["0.5", "1.25", "2"]),
       shift=st.sampled_from(["0", "0.5", "1"]), combine=st.sampled_from(["+", "*"]))
def test_random_specs_mixing_scipy_and_torch_match_mpmath(tmp_path_factory, first, second, torch_part, scale,
                                                          shift, combine):
    """A random formula of two SciPy functions and torch ops, with a param: every order to 2 of
    the generated module against the generated tests' own mpmath reference (``composed``)."""
    pytest.importorskip("scipy.special")
    tmp_path = tmp_path_factory.mktemp("random")
    expr = f"{first.format(f'a * x + {shift}')} {combine} {torch_part} * {second.format(f'{scale} * x')}"
    module = build_spec(tmp_path, name="r", expr=expr, inputs=["x"], params={"a": 1.5}, order=2,
                        domain={"x": [0.5, 2]})
    tests = import_path(tmp_path / "out" / "tests" / "test_r.py")
    point = torch.tensor([0.6, 1.3, 1.9], dtype=torch.float64, requires_grad=True)
    for a in (1.5, 0.7):
        ours = _chain(functools.partial(module.r, a=a), [point], 2)
        reference = _chain(functools.partial(tests.composed, a=a), [point], 2)
        for k, (got, want) in enumerate(zip(ours, reference)):
            torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-11, msg=lambda m, k=k: f"{expr}, order {k}: {m}")


def test_importlib_finds_the_examples_kernel():
    """specs/freely_jointed_chain.yaml's extern lives in specs/numpy_kernels.py, importable from
    the project's root (the generated tests run there)."""
    assert importlib.util.find_spec("specs.numpy_kernels") is not None


def test_a_meta_tensor_is_refused_with_a_type_error(tmp_path):
    """SciPy needs values: a meta tensor was copied to the CPU after a warning and failed in torch
    ("Cannot copy out of meta tensor")."""
    pytest.importorskip("scipy.special")
    module = build_spec(tmp_path, name="k", expr="kv(1.5, x)", inputs=["x"], order=1, domain={"x": [0.5, 3]})
    with pytest.raises(TypeError, match=r"k\(\): scipy.special.kv needs values, and a tensor on the meta device"):
        module.k(torch.empty(3, device="meta"))
