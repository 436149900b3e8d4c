"""SymPy -> ATen C++ source: the torch printer's constructs spelled in C++ (``at::`` for tensors,
``std::`` for doubles), one ``_print_X`` per construct that differs.

What the C++ op (``cpp: true``, docs/guide/deployment.md) cannot compute yet raises
``NotImplementedError`` naming the construct: the Bessel functions' and SciPy's (their derivatives
are the Python module's own Functions) and anything this printer has no method for.
"""

from __future__ import annotations

import math

import sympy
from sympy.printing.precedence import PRECEDENCE

from ..derive.symbolic import SumTerm
from .printer import TorchPrinter
from .statements import CppStatements


def cpp_name(python_name: str) -> str:
    """The C++ spelling of a torch or math callable the torch printer writes."""
    if python_name.startswith("torch.special."):
        return "at::special_" + python_name.removeprefix("torch.special.")
    if python_name.startswith("torch."):
        return "at::" + python_name.removeprefix("torch.")
    if python_name.startswith("math."):
        return "std::" + python_name.removeprefix("math.")
    raise NotImplementedError(f"no C++ spelling of {python_name}")


class AtenPrinter(CppStatements, TorchPrinter):
    """Prints SymPy expressions as ATen C++ expressions, given which symbols hold tensors (the
    rest hold doubles: params and numbers)."""

    printmethod = "_atencode"  # no node's torch-only ``_torchcode`` applies here

    def __init__(self, tensors, fold_sums: bool = True):
        super().__init__(tensors, fold_sums=fold_sums)

    def _module_format(self, fqn, register=True):
        return cpp_name(fqn)

    def _call(self, tensor_function: str, float_function: str, *args) -> str:
        printed = ", ".join(self._print(arg) for arg in args)
        if any(self.is_tensor(arg) for arg in args):
            return f"{cpp_name(tensor_function)}({printed})"
        return f"{cpp_name(float_function)}({printed})"

    # --- arithmetic --------------------------------------------------------------------
    # ATen's operators with a number on the left (1 - t, 2 / t) fill a tensor with the number first:
    # three kernels where Python's torch takes one (rsub) or two (reciprocal, mul)
    def _print_Mul(self, expr):
        parts = sympy.Mul.make_args(expr)
        fused = self._tanh_backward(parts)
        if fused:
            return fused
        denominators = [p for p in parts if p.is_Pow and p.exp.is_Number and p.exp < 0 and self.is_tensor(p.base)]
        numerators = [p for p in parts if p not in denominators]
        if not denominators or any(self.is_tensor(p) for p in numerators):
            return super(TorchPrinter, self)._print_Mul(expr)
        inverse = f"at::reciprocal({self._print(sympy.Mul(*(p.base ** -p.exp for p in denominators)))})"
        scale = sympy.Mul(*numerators)
        if scale in (1, -1):
            return inverse if scale == 1 else f"-{inverse}"
        return f"{self.parenthesize(scale, PRECEDENCE['Mul'])} * {inverse}"

    def _print_Add(self, expr, order=None):
        """A tensor sum with its numbers last (``t + 1``), or ``at::rsub(t, 1)`` for ``1 - t``."""
        if self.fold_sums or not self.is_tensor(expr):
            return super()._print_Add(expr, order)
        terms = sympy.Add.make_args(expr)
        number = sympy.Add(*(term for term in terms if not self.is_tensor(term)))
        tensors = sympy.Add(*(term for term in terms if self.is_tensor(term)))
        if number == 0:
            return super()._print_Add(expr, order)
        if not tensors.is_Add and tensors.could_extract_minus_sign():
            return self._rsub(self._print(number), -tensors)
        sign, magnitude = ("-", -number) if number.could_extract_minus_sign() else ("+", number)
        code = super()._print_Add(tensors, order) if tensors.is_Add else self._print(tensors)
        return f"{code} {sign} {self.parenthesize(magnitude, PRECEDENCE['Add'])}"

    def _rsub(self, number: str, tensor) -> str:
        return f"at::rsub({self._print(tensor)}, {number})"

    @staticmethod
    def zeros_like(tensor: str) -> str:
        return f"at::zeros_like({tensor})"

    @staticmethod
    def broadcast_all(value: str, tensors) -> str:
        return f"_broadcast_all({value}, {{{', '.join(tensors)}}})"

    def _tanh_backward(self, parts) -> str | None:
        sech2 = next((part for part in parts if type(part).__name__ == "Sech2" and self.is_tensor(part)), None)
        tensors = [part for part in parts if part is not sech2 and self.is_tensor(part)]
        if sech2 is None or not tensors:
            return None
        call = f"at::tanh_backward({self._print(sympy.Mul(*tensors))}, {self._print(sech2.args[0])})"
        scale = sympy.Mul(*(part for part in parts if not self.is_tensor(part)))
        if scale == 1:
            return call
        return f"-{call}" if scale == -1 else f"{self.parenthesize(scale, PRECEDENCE['Mul'])} * {call}"

    def parenthesize(self, item, level, strict=False):
        return super(TorchPrinter, self).parenthesize(item, level, strict)

    def _shallow(self, code: str, expr) -> str:
        return code  # C++ needs no line breaks: nothing is hoisted

    def _fold(self, total: str, term: SumTerm) -> str:
        """``total + term`` in one kernel: ``at::addcmul`` or ``at::add`` with its alpha."""
        if len(term.factors) >= 2:
            a, b = sympy.Mul(*term.factors[:-1]), term.factors[-1]
            value = "" if term.coefficient == 1 else f", {self._print(term.coefficient)}"
            return f"at::addcmul({total}, {self._print(a)}, {self._print(b)}{value})"
        (factor,) = term.factors
        if term.coefficient in (1, -1):
            sign = "+" if term.coefficient == 1 else "-"
            return f"{total} {sign} {self.parenthesize(factor, PRECEDENCE['Add'])}"
        return f"at::add({total}, {self._print(factor)}, {self._print(term.coefficient)})"

    def _print_Float(self, expr):
        value = float(expr)
        if math.isinf(value):
            return f"{'-' if value < 0 else ''}std::numeric_limits<double>::infinity()"
        if math.isnan(value):
            return "std::numeric_limits<double>::quiet_NaN()"
        text = repr(value)
        return text if any(c in text for c in ".en") else f"{text}.0"

    def _print_Integer(self, expr):
        value = int(expr)
        if -(2**31) <= value < 2**31:
            return str(value)
        return self._print_Float(sympy.Float(value))  # as the torch printer: a double beyond int64

    def _print_Rational(self, expr):
        return f"({expr.p}.0 / {expr.q})"  # not C++'s integer division

    def _print_Half(self, expr):
        return "0.5"

    def _print_Pi(self, expr):
        return repr(math.pi)

    def _print_Exp1(self, expr):
        return repr(math.e)

    def _print_Pow(self, expr, rational=False):
        base, exponent = expr.base, expr.exp
        tensor = self.is_tensor(base)
        if exponent == sympy.S.Half:
            return f"{'at' if tensor else 'std'}::sqrt({self._print(base)})"
        if exponent == -sympy.S.Half:
            return f"at::rsqrt({self._print(base)})" if tensor else f"(1.0 / std::sqrt({self._print(base)}))"
        if exponent == -1:
            return f"at::reciprocal({self._print(base)})" if tensor else f"1.0 / {self.parenthesize(base, PRECEDENCE['Mul'], strict=True)}"
        power = "at::pow" if tensor else "std::pow"
        exponent_code = repr(float(exponent)) if exponent.is_Rational and not exponent.is_Integer else self._print(exponent)
        return f"{power}({self._print(base)}, {exponent_code})"

    # --- functions ---------------------------------------------------------------------
    def _print_sign(self, expr):
        (arg,) = expr.args
        code = self._print(arg)
        return f"at::sign({code})" if self.is_tensor(arg) else f"double(({code} > 0) - ({code} < 0))"

    def _print_sigmoid(self, expr):
        (arg,) = expr.args
        if self.is_tensor(arg):
            return f"at::sigmoid({self._print(arg)})"
        return f"({self._print(sympy.S.Half + sympy.tanh(arg / 2) / 2)})"

    def _print_softplus(self, expr):
        (arg,) = expr.args
        if self.is_tensor(arg):
            return f"at::softplus({self._print(arg)}, 1, 40)"  # the threshold the torch printer gives
        return super()._print_softplus(expr)

    def _binary(self, name: str, a, b) -> str | None:
        if self.is_tensor(a) or self.is_tensor(b):
            return f"at::{name}({self._as_tensor(a, b)}, {self._as_tensor(b, a)})"
        return None

    def _print_logaddexp(self, expr):
        a, b = expr.args
        if self.is_tensor(a) or self.is_tensor(b):
            return self._binary("logaddexp", a, b)
        return f"(std::max({self._print(a)}, {self._print(b)}) + std::log1p(std::exp(-std::fabs({self._print(a - b)}))))"

    def _print_Max(self, expr):
        if any(self.is_tensor(arg) for arg in expr.args):
            raise NotImplementedError("Max of tensors is not generated")
        code = self._print(expr.args[0])
        for arg in expr.args[1:]:
            code = f"std::max<double>({code}, {self._print(arg)})"
        return code

    def _as_tensor(self, expr, other) -> str:
        if self.is_tensor(expr):
            return self._print(expr)
        return f"at::full_like({self._print(other)}, {self._print(expr)})"

    def _elementwise(self, function: str, arg, index=None) -> str:
        """``at::function([index, ]arg)``; of a double, through a float64 tensor of no dimension."""
        value = self._print(arg) if self.is_tensor(arg) else f"at::scalar_tensor({self._print(arg)}, at::kDouble)"
        call = f"{cpp_name(function)}({'' if index is None else f'{index}, '}{value})"
        return call if self.is_tensor(arg) else f"{call}.item<double>()"

    def _print_xlogy(self, expr):
        x, y = expr.args
        if self.is_tensor(x) or self.is_tensor(y):
            return f"at::xlogy({self._as_tensor(x, y)}, {self._as_tensor(y, x)})"
        return f"({self._print(x)} == 0 ? 0.0 : {self._print(x)} * std::log({self._print(y)}))"

    def _print_SpecialFunctionBase(self, expr):
        raise NotImplementedError(f"{type(expr).language} (its derivatives are the Python module's own Functions)")

    def _print_ExternalFunctionBase(self, expr):
        raise NotImplementedError(f"{type(expr).language} (an external function runs in Python)")

    def _print_Horner(self, expr):
        return expr._print_nested(self)

    def _print_Ratio(self, expr):
        return expr._division(self, " / ")

    def _print_Norm(self, expr):
        """``_norm({a, b, c})``, the op's helper; numbers among the components as full tensors."""
        like = next(arg for arg in expr.args if self.is_tensor(arg))
        if not self.is_tensor(expr):
            return f"std::hypot({', '.join(self._print(arg) for arg in expr.args)})"
        return f"_norm({{{', '.join(self._as_tensor(arg, like) for arg in expr.args)}}})"

    def _print_LogCoshNear(self, expr):
        half = self.parenthesize(expr.args[0], PRECEDENCE["Mul"], strict=True)
        return f"at::log1p(2 * at::pow(at::sinh({half} / 2), 2))"

    def _print_Erfcx(self, expr):
        (u,) = expr.args
        if self.is_tensor(u):
            return f"at::special_erfcx({self._print(u)})"
        return f"(std::exp({self._print(u**2)}) * std::erfc({self._print(u)}))"

    # --- branches ----------------------------------------------------------------------
    def _choice(self, value: str, cond: str, other: str) -> str:
        """A choice on params, made with C++'s ``?:`` (both sides of one type)."""
        return f"({cond} ? {value} : {other})"

    def _where(self, cond: str, value: str, other: str) -> str:
        return f"at::where({cond}, {value}, {other})"

    def _scalar_operand(self, value) -> str:
        if self.is_tensor(value) or (value.is_Number and abs(value) <= 65504):
            return self._print(value)
        return f"at::scalar_tensor({self._print(value)}, at::kDouble)"

    @staticmethod
    def _filled(like: str, code: str, value) -> str:
        if isinstance(value, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction,
                              sympy.logic.boolalg.BooleanAtom)):
            return f"at::full_like({like}, {code}, at::kBool)"
        if value.is_Number and abs(value) <= 65504:
            return f"at::full_like({like}, {code})"
        return f"(at::zeros_like({like}) + at::scalar_tensor({code}, at::kDouble))"

    def _print_Copy(self, expr):
        return f"{self.parenthesize(expr.args[0], PRECEDENCE['Atom'], strict=True)}.clone()"

    def _print_Guard(self, expr):
        value, taken, safe = expr.args
        side = expr.side
        bound = self._scalar_operand(safe) if safe.is_Number else self._print(safe)
        if side:
            return f"at::clamp_{side}({self._print(value)}, {bound})"
        return f"at::where({self._print(taken)}, {self._print(value)}, {bound})"

    _print_ClampBelow = _print_ClampAbove = _print_Guard

    def _print_Masked(self, expr):
        value, taken = expr.args
        mask = self._print(taken) if taken.is_Symbol else f"({self._print(taken)})"
        if not self.is_tensor(value):
            return f"{mask}.to({self._tensor_of(taken)}.scalar_type())"
        return f"{self.parenthesize(value, PRECEDENCE['Mul'], strict=True)} * {mask}"

    def _joined_conditions(self, expr, tensor_op: str, float_op: str) -> str:
        op = tensor_op if self.is_tensor(expr) else {"and": "&&", "or": "||"}[float_op]
        return f" {op} ".join(f"({self._print(arg)})" for arg in sorted(expr.args, key=sympy.default_sort_key))

    def _print_Not(self, expr):
        (arg,) = expr.args
        return f"~({self._print(arg)})" if self.is_tensor(arg) else f"!({self._print(arg)})"

    def _print_BooleanTrue(self, expr):
        return "true"

    def _print_BooleanFalse(self, expr):
        return "false"

    def emptyPrinter(self, expr):
        raise NotImplementedError(f"{type(expr).__name__} ({expr})")

    _print_not_supported = emptyPrinter
