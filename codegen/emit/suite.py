"""Plans -> the generated pytest file: the composed reference, the shapes, params and points each
test runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..derive.branches import boundaries
from ..derive.rewrite import exponents_through_log
from ..language import external, special
from ..plan import ModulePlan
from ..provenance import header
from ..spec import DEFAULT_DOMAIN
from .functions import _signature
from .printer import TorchPrinter
from .text import _environment, ruff_formatted


def composed_code(plan: ModulePlan) -> tuple[str, TorchPrinter]:
    """The expression written directly in torch ops (the tests' and the memory check's reference,
    as a user writes it; a tuple of them, or stacked, for a vector-valued spec), and its printer
    (which knows whether it needs ``math``)."""
    spec = plan.spec
    printer = TorchPrinter(spec.inputs, fold_sums=False, reference=True)
    values = [_composed_value(expr, spec, printer) for expr in plan.exprs]
    if not spec.outputs:
        return values[0], printer
    joined = f"({', '.join(values)},)"
    return (f"torch.stack({joined}, dim=-1)" if spec.stack else joined), printer


def _composed_value(expr: sympy.Expr, spec, printer: TorchPrinter) -> str:
    inputs = [sympy.Symbol(name, real=True) for name in spec.inputs]
    # as the Functions write them (plan.strategy._masking): torch's pow backward loses the
    # exponent's part of its derivative where the exponent is 0
    value = printer.doprint(exponents_through_log(expr, inputs))
    missing = [name for name in spec.inputs if sympy.Symbol(name, real=True) not in expr.free_symbols]
    if missing or _param_choice_of_constant(expr, spec):
        # keep every input in the graph, so the reference has the broadcast shape and dtype
        value = f"{value} + 0 * ({' + '.join(spec.inputs)})"
    return value


def _param_choice_of_constant(expr: sympy.Expr, spec) -> bool:
    """Whether a choice on params alone may take a branch without inputs (where(a > 0, x, 1)):
    the composed expression then may not reach the inputs at all."""
    inputs = {sympy.Symbol(name, real=True) for name in spec.inputs}
    for piecewise in expr.atoms(sympy.Piecewise):
        if any(piece.cond.free_symbols & inputs for piece in piecewise.args):
            continue  # a choice on inputs: torch.where, which keeps them in the graph
        if any(not piece.expr.free_symbols & inputs for piece in piecewise.args):
            return True
    return False


def render_tests(plan: ModulePlan, digest: str, measured=None, reference_domain: dict | None = None,
                 other_params: dict | None = None) -> str:
    """The pytest file of ``plan``'s module.

    Args:
        plan: the module's plan, as ``render_module`` takes it.
        digest: as ``render_module``'s.
        measured: the build's ``accuracy.Report``: its ``table`` of exact values (mpmath) the
            tests check, within the bound in bits; None: no such test.
        reference_domain: input -> (lo, hi) where autograd through the composed expression is
            accurate (``accuracy.reference_domain``), where the tests compare with it; None: the
            whole domain.
        other_params: the params' other values the tests run at (``param_values``); None: the
            defaults only.

    Returns:
        The test file's text, ruff-formatted, without its seal line.
    """
    spec = plan.spec
    value, printer = composed_code(plan)
    declared, declared_printer = _declared_references(plan)
    accuracy = max(special.torch_error(expr) for expr in plan.exprs)
    shapes = _test_shapes(len(spec.inputs))
    return ruff_formatted(_environment().get_template("test_module.py.jinja").render(
        header=header(spec.path, digest),
        spec=spec,
        uses_math=printer.uses_math or declared_printer.uses_math,
        uses_torch="torch." in value + "".join(d for r in declared for d in r.derivatives),  # x**2 needs none
        composed=value,
        signature=_signature(spec),
        params={name: repr(v) for name, v in spec.params},
        other_params={name: repr(v) for name, v in other_params.items()} if other_params else None,
        domain={name: (repr(lo), repr(hi)) for name, (lo, hi) in spec.domain},
        shapes={name: repr(shape) for name, shape in zip(spec.inputs, shapes)},
        stability_points={
            name: repr(_stability_points(bounds, explicit=name in spec.explicit_domain)) for name, bounds in spec.domain
        },
        strategy=plan.strategy,
        boundaries={name: repr(values) for name, values in boundaries(plan.every_formula, spec).items()},
        accuracy=repr(accuracy) if accuracy else None,
        specials=any(expr.atoms(special.SpecialFunctionBase) for expr in plan.exprs),
        order_limited=bool(plan.externals),
        declared=declared,
        exact=measured.table if measured else (),
        reference_domain=reference_domain,
    ), spec.line_length)


@dataclass(frozen=True)
class DeclaredReference:
    """A spec's extern in the tests' reference: its implementation, and its derivatives as
    the spec declares them, in torch code (None where an argument is a number or a param)."""

    name: str
    args: str
    impl: str
    derivatives: tuple[str, ...]


def _declared_references(plan: ModulePlan) -> tuple[list[DeclaredReference], TorchPrinter]:
    """The spec's externs as the tests' reference declares them, and the printer of their
    derivatives (which knows whether they need ``math``)."""
    references = []
    printer = TorchPrinter([], fold_sums=False, reference=True)
    for cls in external.closure(plan.externals):
        if not issubclass(cls, external.UserExternBase):
            continue
        extern = cls.declaration
        printer.tensors = frozenset(s for s, d in zip(cls.symbols, cls.derivatives) if d is not None)
        derivatives = tuple("None" if d is None else f"lambda {', '.join(extern.args)}: {printer.doprint(d)}"
                            for d in cls.derivatives)
        references.append(DeclaredReference(extern.name, ", ".join(extern.args), extern.impl, derivatives))
    return references, printer


def _stability_points(bounds: tuple[float, float], explicit: bool) -> tuple[float, ...]:
    """The domain's ends; where the spec sets no domain for the input, also +-20, +-40, +-100.

    An explicit domain is where the user says the function is used, even when it equals the
    default: probing outside it can demand what the function cannot give there.
    """
    lo, hi = bounds
    if explicit or bounds != DEFAULT_DOMAIN:
        return (lo, hi)
    return (-100.0, -40.0, -20.0, lo, hi, 20.0, 40.0, 100.0)


def _test_shapes(count: int) -> list[tuple[int, ...]]:
    """Shapes that broadcast together and exercise gradient reduction (a scalar among them)."""
    if count == 1:
        return [(3, 4)]
    cycle = [(3, 4), (4,), (3, 1), (), (1, 4), (2, 1, 1)]
    return [cycle[i % len(cycle)] for i in range(count)]
