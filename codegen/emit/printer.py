"""SymPy -> torch source: one ``_print_X`` method per construct, as SymPy's own printers do.

Tensor-valued subexpressions print as ``torch.*`` calls. Subexpressions of params alone are
Python floats at run time, so they print with ``math.*`` (torch functions refuse floats). The
language's functions written as one call (``torch.exp`` of a tensor, ``math.exp`` of a float) get
their methods from the registry (``language/registry.py``), after the class.
"""

from __future__ import annotations

import ast

import sympy
from sympy.codegen.cfunctions import log1p
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.pycode import PythonCodePrinter
from sympy.printing.str import StrPrinter

from ..derive.symbolic import SumTerm
from ..language.external import UserExternBase
from ..language.formula import oriented
from ..language.registry import REGISTRY
from .statements import PythonStatements

INT64_LIMIT = 2**63  # a Python int scalar torch takes lies in [-2**63, 2**63)
# The largest magnitude a Python float may have to be a where()/clamp() operand of any float
# tensor: float16's largest finite value. torch converts such a scalar to the tensor's dtype and
# raises on overflow (min(x, 1e300) in float32: "value cannot be converted to type float").
HALF_MAX = 65504


def _fits_every_float(value) -> bool:
    """Whether ``value`` is a number every float dtype holds (as a Python scalar operand)."""
    return value.is_Number and abs(value) <= HALF_MAX


class Copy(sympy.Function):
    """A copy of a tensor (``x.clone()``): a forward may not return an input itself, which a choice
    on params alone (``x if a > 0 else x**2``) would."""

    nargs = 1


class TorchPrinter(PythonStatements, PythonCodePrinter):
    """Prints SymPy expressions as torch code, given which symbols hold tensors."""

    printmethod = "_torchcode"

    def __init__(self, tensors, settings=None, fold_sums: bool = True, scaled_last=(), name_for=None,
                 reference: bool = False):
        super().__init__({"fully_qualified_modules": True, **(settings or {})})
        # reference: the generated tests' composed expression, where a special function torch
        # cannot differentiate is the tests' mpmath one (checks.special), not the module's
        self.reference = reference
        self.specials: set[type] = set()  # the SpecialFunctionBase classes printed (special.py)
        self.externals: set[type] = set()  # the ExternalFunctionBase classes printed (external.py)
        # A param as a keyword: a fold's scale as addcmul's value= or add's alpha=, a guard's bound
        # as clamp's max=. Off for fused kernels: torch.compile(dynamic=True) (torch 2.13)
        # specializes such a keyword to the param's first value when the param is also used in a
        # tensor op, so another value gives wrong numbers (sin(w*x) then add(a, b, alpha=w));
        # a product, or torch.where, is recompiled right.
        self.scalar_keywords = True
        self.tensors = frozenset(sympy.Symbol(str(name), real=True) for name in tensors)
        self.fold_sums = fold_sums
        self.scaled_last = frozenset(sympy.Symbol(str(name), real=True) for name in scaled_last)
        self.uses_math = False
        # name_for(expr) -> a fresh local name: where a fold would nest calls more than two deep,
        # its inner part is assigned to a temporary of that name first (``take_hoisted``)
        self.name_for = name_for
        self.hoisted: list[tuple[str, str]] = []
        self.masks: dict[sympy.Symbol, sympy.Basic] = {}  # temporaries that hold conditions -> their definitions
        self._hoisted_names: dict[str, str] = {}

    def _module_format(self, fqn, register=True):
        """As SymPy's; a ``math.`` name (``math.nan`` for 0*log(0)) makes the module import math."""
        if fqn.startswith("math."):
            self.uses_math = True
        return super()._module_format(fqn, register)

    def new_scope(self) -> None:
        """Forget the hoisted temporaries: lines after this may run where those did not (an ``if``)."""
        self._hoisted_names = {}

    def take_hoisted(self) -> list[str]:
        """The assignments the last ``doprint`` needs before its line (each once), and forget them."""
        lines = [f"{name} = {code}" for name, code in self.hoisted]
        self.hoisted = []
        return lines

    def is_tensor(self, expr: sympy.Expr) -> bool:
        return bool(expr.free_symbols & self.tensors)

    # --- arithmetic --------------------------------------------------------------------
    def _print_Mul(self, expr):
        """As SymPy prints it, except a product of a cotangent named in ``scaled_last``, whose float
        factors come last: ``grad_out * x**2 * 3``, not ``3 * grad_out * x**2``. In a backward that
        autograd differentiates, the first multiplies the cotangent by x**2 and saves only the
        cotangent (which autograd holds anyway); the second forms ``3 * grad_out``, a new tensor
        autograd must keep for the second-order pass."""
        parts = sympy.Mul.make_args(expr)
        fused = self._tanh_backward(parts)
        if fused:
            return fused
        floats = [part for part in parts if not self.is_tensor(part)]
        if not (floats and self.scaled_last & set(parts)) or sympy.Mul(*floats) == -1:
            return StrPrinter._print_Mul(self, expr)  # a sign is printed first, as -a * b
        tensors = sympy.Mul(*(part for part in parts if self.is_tensor(part)))
        product = self.parenthesize(tensors, PRECEDENCE["Mul"], strict=True)
        scale = sympy.Mul(*floats)
        if scale.is_Rational and not scale.is_Integer:
            # p/q is a float Python computes exactly rounded; a lone q is a scalar torch takes (int64)
            return (f"{product} / {self._print(sympy.Integer(scale.q))}" if scale.p == 1
                    else f"{product} * ({scale.p}/{scale.q})")
        if scale.is_Number:
            return f"{product} * {self._print(scale)}"
        return f"{product} * {self.parenthesize(scale, PRECEDENCE['Atom'], strict=True)}"

    def _tanh_backward(self, parts) -> str | None:
        """``g * Sech2(y)`` (derive/rewrite/) as torch's fused ``tanh_backward(g, y)``, times the float factors."""
        sech2 = next((part for part in parts if type(part).__name__ == "Sech2" and self.is_tensor(part)), None)
        tensors = [part for part in parts if part is not sech2 and self.is_tensor(part)]
        if sech2 is None or not tensors:
            return None
        call = f"torch.ops.aten.tanh_backward({self._print(sympy.Mul(*tensors))}, {self._print(sech2.args[0])})"
        scale = sympy.Mul(*(part for part in parts if not self.is_tensor(part)))
        if scale == 1:
            return call
        return f"-{call}" if scale == -1 else f"{self.parenthesize(scale, PRECEDENCE['Mul'])} * {call}"

    def _print_Sech2(self, expr):
        """Alone (no tensor factor to fuse with): (1 - y)*(y + 1), the stable form."""
        (y,) = expr.args
        return self._print(sympy.Mul(1 - y, 1 + y, evaluate=False))

    def _print_Add(self, expr, order=None):
        """A sum of tensor terms in as few kernels as eager torch has: the first plain term (else the
        first) as it is, then each product folded in by ``torch.addcmul`` (input + value * a * b, one
        kernel where ``a * b`` then ``+`` takes two) and each scaled tensor by ``torch.add(...,
        alpha=c)``; float terms (params, numbers) are added last. A sum of floats prints as usual, and
        so does every sum with ``fold_sums`` off. The renderer folds only the levels of ``nested``,
        where kernel count is the point: a single-level backward is differentiated by autograd,
        whose backward of addcmul costs more than of a product and a sum, and the other strategies'
        code, the jvp and the tests' composed reference read as a person would write them."""
        if not self.fold_sums or not self.is_tensor(expr):
            return super()._print_Add(expr, order)
        terms = [SumTerm.of(term, self.is_tensor) for term in self._as_ordered_terms(expr, order=order)]
        tensors = [term for term in terms if term.factors]
        first = min(tensors, key=lambda term: term.saving)  # the first of the least to gain by folding
        floats = sympy.Add(*(term.expr for term in terms if not term.factors))
        if floats != 0 and first.coefficient == -1 and len(first.factors) == 1:
            # 1 - t: one kernel (torch.rsub), where -t + 1 takes two
            code = self._rsub(self._print(floats), first.factors[0])
            partial, floats = floats + first.expr, sympy.S.Zero  # partial: what ``code`` holds
        else:
            code, partial = self._print(first.expr), first.expr
        for term in tensors:
            if term is not first:
                code = self._fold(self._shallow(code, partial), term)
                partial += term.expr
        if floats != 0:
            sign, magnitude = ("-", -floats) if floats.could_extract_minus_sign() else ("+", floats)
            code = f"{code} {sign} {self.parenthesize(magnitude, precedence(expr))}"
        return code

    @staticmethod
    def zeros_like(tensor: str) -> str:
        return f"torch.zeros_like({tensor})"

    @staticmethod
    def broadcast_all(value: str, tensors) -> str:
        """``value`` in a new tensor of ``tensors``' shape and promoted dtype (the runtime's helper)."""
        return f"_broadcast_all({value}, {', '.join(tensors)})"

    def _rsub(self, number: str, tensor) -> str:
        """``number - tensor``: one kernel (torch.rsub)."""
        return f"{number} - {self.parenthesize(tensor, PRECEDENCE['Add'])}"

    def parenthesize(self, item, level, strict=False):
        """As SymPy's, but a sum printed as one call (``torch.addcmul(...)``) needs no parentheses."""
        printed = super().parenthesize(item, level, strict)
        if printed.startswith("(") and isinstance(item, sympy.Add) and self.is_tensor(item):
            inner = self._print(item)
            if isinstance(ast.parse(inner, mode="eval").body, ast.Call):
                return inner
        return printed

    def _fold(self, total: str, term: SumTerm) -> str:
        """``total + term`` in one kernel."""
        if not (self.scalar_keywords or term.coefficient.is_Number):
            sign, magnitude = ("-", -term.expr) if term.expr.could_extract_minus_sign() else ("+", term.expr)
            return f"{total} {sign} {self.parenthesize(magnitude, PRECEDENCE['Add'])}"
        if len(term.factors) >= 2:
            a, b = sympy.Mul(*term.factors[:-1]), term.factors[-1]
            value = "" if term.coefficient == 1 else f", value={self._print(term.coefficient)}"
            return f"torch.addcmul({total}, {self._argument(a)}, {self._argument(b)}{value})"
        (factor,) = term.factors
        if term.coefficient in (1, -1):
            sign = "+" if term.coefficient == 1 else "-"
            return f"{total} {sign} {self.parenthesize(factor, PRECEDENCE['Add'])}"
        return f"torch.add({total}, {self._argument(factor)}, alpha={self._print(term.coefficient)})"

    def _argument(self, expr) -> str:
        return self._shallow(self._print(expr), expr)

    def _shallow(self, code: str, expr) -> str:
        """``code``, or the name of a temporary holding it where, as an argument of a fold, it would
        nest calls more than two deep (``name_for``): each line stays checkable by eye. The same
        tensors are computed either way: no kernel more, none saved for backward."""
        if self.name_for is None or _call_depth(code) < 2:
            return code
        if code not in self._hoisted_names:
            self._hoisted_names[code] = self.name_for(expr)
            self.hoisted.append((self._hoisted_names[code], code))
        return self._hoisted_names[code]

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Integer(self, expr):
        """Exactly within int64; beyond it (2**64) as the nearest float, exact for a power of two:
        torch raises OverflowError ('int too big to convert') on a Python int scalar beyond 64 bits.
        The parser refuses constants beyond 1e300; only a derivative's coefficient can exceed
        float64, and stays the exact int it was."""
        value = int(expr)
        if -INT64_LIMIT <= value < INT64_LIMIT:
            return str(value)
        try:
            return repr(float(value))
        except OverflowError:  # beyond float64 (a derivative's coefficient): as before, exact
            return str(value)

    def _print_Rational(self, expr):
        return f"{expr.p}/{expr.q}"

    def _print_Pow(self, expr, rational=False):
        base, exponent = expr.base, expr.exp
        if exponent == sympy.S.Half:
            return self._call("torch.sqrt", "math.sqrt", base)
        if exponent == -sympy.S.Half:
            if self.is_tensor(base):
                return f"torch.rsqrt({self._print(base)})"
            return f"1/{self._call('torch.sqrt', 'math.sqrt', base)}"
        if exponent == -1:
            return f"1/{self.parenthesize(base, precedence(expr))}"
        if exponent.is_Rational and not exponent.is_Integer:
            return f"{self.parenthesize(base, precedence(expr))}**({float(exponent)!r})"
        # ** is right-associative: a base of the same precedence, (b**c)**d, needs its parentheses
        return f"{self.parenthesize(base, precedence(expr))}**{self.parenthesize(exponent, precedence(expr))}"

    # --- constants ---------------------------------------------------------------------
    def _print_Pi(self, expr):
        self.uses_math = True
        return "math.pi"

    def _print_Exp1(self, expr):
        self.uses_math = True
        return "math.e"

    def _print_Half(self, expr):
        return "1/2"

    # --- functions ---------------------------------------------------------------------
    def _call(self, tensor_function: str, float_function: str, *args) -> str:
        """``tensor_function(args)`` (torch's) for tensor arguments, ``float_function(args)`` (math's)
        for floats."""
        printed = ", ".join(self._print(arg) for arg in args)
        if any(self.is_tensor(arg) for arg in args):
            return f"{tensor_function}({printed})"
        self.uses_math = True
        return f"{float_function}({printed})"

    # The language's functions written as one call (exp, sin, abs, ...) are printed by the
    # ``_print_X`` methods made from the registry after the class; the methods below are the
    # functions and nodes whose code needs more than that.

    def _print_atan2(self, expr):
        return self._binary("atan2", *expr.args) or self._call("torch.atan2", "math.atan2", *expr.args)

    def _print_sign(self, expr):
        (arg,) = expr.args
        if self.is_tensor(arg):
            return f"torch.sign({self._print(arg)})"
        self.uses_math = True
        return f"math.copysign(1.0, {self._print(arg)}) * ({self._print(arg)} != 0)"

    def _print_sigmoid(self, expr):
        (arg,) = expr.args
        if self.is_tensor(arg):
            return f"torch.sigmoid({self._print(arg)})"
        # a float: through tanh, which cannot overflow, and parenthesized like the call it replaces
        return f"({self._print(sympy.S.Half + sympy.tanh(arg / 2) / 2)})"

    def _print_softplus(self, expr):
        (arg,) = expr.args
        if self.is_tensor(arg):
            # torch's default threshold, 20, returns u itself from u = 20 on, 18 bits short at 20.5
            # in float64; from 40 on, log1p(exp(-u)) is below u's last bit in both dtypes
            return f"torch.nn.functional.softplus({self._print(arg)}, threshold=40)"
        # a float: max(u, 0) + log1p(exp(-|u|)), which cannot overflow, parenthesized like a call
        return f"({self._print(sympy.Max(arg, 0) + log1p(sympy.exp(-sympy.Abs(arg))))})"

    def _print_logaddexp(self, expr):
        a, b = expr.args
        return self._binary("logaddexp", a, b) or self._print(sympy.Max(a, b) + log1p(sympy.exp(-sympy.Abs(a - b))))

    def _print_hypot(self, expr):
        return self._binary("hypot", *expr.args) or self._call("torch.hypot", "math.hypot", *expr.args)

    def _binary(self, name: str, a, b) -> str | None:
        """``torch.name(a, b)`` when either argument is a tensor (the other made one); else None."""
        if self.is_tensor(a) or self.is_tensor(b):
            return f"torch.{name}({self._as_tensor(a, b)}, {self._as_tensor(b, a)})"
        return None

    def _print_Max(self, expr):
        if any(self.is_tensor(arg) for arg in expr.args):
            raise NotImplementedError("Max of tensors is not generated")
        return f"max({', '.join(self._print(arg) for arg in expr.args)})"

    def _as_tensor(self, expr, other) -> str:
        """atan2, logaddexp, hypot need two tensors: a float argument becomes a full tensor like the other."""
        if self.is_tensor(expr):
            return self._print(expr)
        return f"torch.full_like({self._print(other)}, {self._print(expr)})"

    # --- special functions (special.py) ---------------------------------------------------
    def _print_polygamma(self, expr):
        n, arg = expr.args
        if n == 0:
            return self._elementwise("torch.digamma", arg)
        return self._elementwise("torch.polygamma", arg, index=n)

    def _print_erfinv(self, expr):
        return self._elementwise("torch.erfinv", expr.args[0])

    def _print_xlogy(self, expr):
        x, y = expr.args
        if self.is_tensor(x) or self.is_tensor(y):
            return f"torch.xlogy({self._print(x)}, {self._print(y)})"
        self.uses_math = True
        return f"(0.0 if {self._print(x)} == 0 else {self._print(x)} * math.log({self._print(y)}))"

    def _print_SpecialFunctionBase(self, expr):
        """``_bessel_j0(x)``: the generated module's differentiable wrapper (special.py); in the
        tests' reference, the tests' own mpmath function ``checks.special("bessel_j0", x)``."""
        cls = type(expr)
        *index, arg = expr.args
        if self.reference:
            return self._elementwise("checks.special", arg, index=f'"{cls.language}"')
        self.specials.add(cls)
        return self._elementwise(cls.runtime, arg, index=index[0] if index else None)

    def _print_ExternalFunctionBase(self, expr):
        """``_jv(nu, x)``: the generated module's call outside autograd (external.py); in the
        tests' reference, SciPy's by mpmath (``checks.scipy_reference("jv", nu, x)``) and a
        declared extern's from its implementation and declared derivatives (``declared_NAME``)."""
        cls = type(expr)
        args = ", ".join(self._print(arg) for arg in expr.args)
        if self.reference:
            if issubclass(cls, UserExternBase):
                return f"declared_{cls.language}({args})"
            return f'checks.scipy_reference("{cls.language}", {args})'
        self.externals.add(cls)
        return f"{expr.runtime}({args})"

    def _elementwise(self, function: str, arg, index=None) -> str:
        """``function([index, ]arg)``; of a float (a function of params, which ``math`` lacks) in
        a float64 tensor, and back to a Python float."""
        value = self._print(arg) if self.is_tensor(arg) else f"torch.tensor({self._print(arg)}, dtype=torch.float64)"
        call = f"{function}({'' if index is None else f'{index}, '}{value})"
        return call if self.is_tensor(arg) else f"float({call})"

    # --- branches (branches.py) -----------------------------------------------------------
    def _print_Piecewise(self, expr):
        """``torch.where`` per branch, the last branch innermost; a choice on params alone is made
        in Python (``a if c else b``), so that the branch not taken is not evaluated."""
        *pieces, (last, _) = [(arg.expr, arg.cond) for arg in expr.args]
        if not any(self.is_tensor(cond) for _, cond in pieces):
            # a choice on params: a float branch of a tensor choice is made a tensor like the
            # others', else a later torch.exp(...) of it would get a float
            like = self._tensor_of(expr) if self.is_tensor(expr) else None
            code = self._branch(last, like)
            for value, cond in reversed(pieces):
                code = self._choice(self._branch(value, like), self._print(cond), code)
            return code
        code, code_is_tensor = self._print(last), self.is_tensor(last)
        for value, cond in reversed(pieces):
            if not self.is_tensor(cond):
                # a choice on params inside a choice on tensors: made in Python, both sides tensors
                like = self._tensor_of(expr)
                code = code if code_is_tensor else self._filled(like, code, last)
                code, code_is_tensor = self._choice(self._branch(value, like), self._print(cond), code), True
                continue
            if self.is_tensor(value) or code_is_tensor:
                branch = self._scalar_operand(value)
            else:  # where() of two floats is float32
                branch = self._filled(self._tensor_of(cond), self._print(value), value)
            if not code_is_tensor:
                code = self._scalar_operand(last)
            code, code_is_tensor = self._where(self._print(cond), branch, code), True
        return code

    def _choice(self, value: str, cond: str, other: str) -> str:
        """A choice made in Python (on params): the branch not taken is not evaluated."""
        return f"({value} if {cond} else {other})"

    def _where(self, cond: str, value: str, other: str) -> str:
        return f"torch.where({cond}, {value}, {other})"

    def _scalar_operand(self, value) -> str:
        """A where() or clamp() operand: a tensor as it is, a number that every float dtype holds
        as it is, any other float (a param, 1e300) as a float64 tensor of no dimension, which torch
        casts to the other operand's dtype (inf past its range) where a Python float overflowing
        it raises (min(x, 1e300) in float32)."""
        if self.is_tensor(value) or _fits_every_float(value):
            return self._print(value)
        return f"torch.tensor({self._print(value)}, dtype=torch.float64)"

    def _branch(self, value, like: str | None) -> str:
        if like is None or self.is_tensor(value):
            return self._print(value)
        return self._filled(like, self._print(value), value)

    @staticmethod
    def _filled(like: str, code: str, value) -> str:
        """A tensor like ``like`` filled with ``code``; bool where the value is a condition (a
        condition SymPy wrote as a choice between conditions, of nested clamps on params). A
        value a float dtype may not hold (a param, 1e300) is added to zeros as a float64 tensor of
        no dimension, which torch casts (inf past the range), where full_like raises."""
        if isinstance(value, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction,
                              sympy.logic.boolalg.BooleanAtom)):
            return f"torch.full_like({like}, {code}, dtype=torch.bool)"
        if _fits_every_float(value):
            return f"torch.full_like({like}, {code})"
        return f"(torch.zeros_like({like}) + torch.tensor({code}, dtype=torch.float64))"

    def _tensor_of(self, cond) -> str:
        """A tensor the condition compares, to give a branch of floats its dtype and device; a mask
        held in a temporary (``masks``: its definition) by the tensors its definition compares."""
        while cond.free_symbols & set(self.masks):
            cond = cond.xreplace(self.masks)
        return self._print(min((s for s in cond.free_symbols if s in self.tensors), key=lambda s: s.name))

    def _print_Copy(self, expr):
        return f"{self.parenthesize(expr.args[0], PRECEDENCE['Atom'], strict=True)}.clone()"

    def _print_Guard(self, expr):
        value, taken, safe = expr.args
        side = expr.side  # branches.ClampBelow, ClampAbove
        # a guard's bound that is a param is the branch's own threshold, compared with the input
        # as it is (r < rc): kept a plain number, as readable as written
        bound = self._scalar_operand(safe) if safe.is_Number else self._print(safe)
        if side and (self.scalar_keywords or not safe.free_symbols):
            return f"torch.clamp({self._print(value)}, {side}={bound})"
        return f"torch.where({self._print(taken)}, {self._print(value)}, {bound})"

    # SymPy looks a Function's printer up by its own class name (or a base ending in "Base")
    _print_ClampBelow = _print_ClampAbove = _print_Guard

    def _print_Masked(self, expr):
        """``value * (taken)``: the mask is a bool tensor, which the product promotes to the value's
        dtype; a mask of numbers (``Masked(1, taken)``) takes the dtype of a tensor it compares."""
        value, taken = expr.args
        mask = self._print(taken) if taken.is_Symbol else f"({self._print(taken)})"  # a mask temporary, or a condition
        if not self.is_tensor(value):
            return f"{mask}.to({self._tensor_of(taken)}.dtype)"
        return f"{self.parenthesize(value, PRECEDENCE['Mul'], strict=True)} * {mask}"

    def _print_Relational(self, expr):
        lhs, op, rhs = oriented(expr, first=self.is_tensor)
        return (f"{self.parenthesize(lhs, PRECEDENCE['Relational'] + 1)} {op} "
                f"{self.parenthesize(rhs, PRECEDENCE['Relational'] + 1)}")

    def _print_And(self, expr):
        return self._joined_conditions(expr, "&", "and")

    def _print_Or(self, expr):
        return self._joined_conditions(expr, "|", "or")

    def _joined_conditions(self, expr, tensor_op: str, float_op: str) -> str:
        """Masks combine with & and | (each part in parentheses, as torch needs); Python bools with and/or."""
        op = tensor_op if self.is_tensor(expr) else float_op
        return f" {op} ".join(f"({self._print(arg)})" for arg in sorted(expr.args, key=sympy.default_sort_key))

    def _print_Not(self, expr):
        (arg,) = expr.args
        return f"~({self._print(arg)})" if self.is_tensor(arg) else f"not ({self._print(arg)})"

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"

    def emptyPrinter(self, expr):
        raise NotImplementedError(f"dbgen cannot print {type(expr).__name__} as torch code: {expr}")

    _print_not_supported = emptyPrinter


def _one_call(function):
    """The ``_print_X`` of a language function written as one call: ``function.torch`` of a
    tensor, ``function.math`` of a float (a function of params alone)."""
    def print_call(self, expr):
        return self._call(function.torch, function.math, *expr.args)

    print_call.__name__ = print_call.__qualname__ = f"_print_{function.sympy}"
    return print_call


# SymPy's printers look a node's method up by its class name, ``_print_<ClassName>``: each language
# function written as one call (registry.py: a torch and a math spelling) gets its method here, from
# its registry entry, where each had a hand-written one-liner. A class the printer prints itself (a
# method in the class body: sqrt's Pow, atan2) keeps its own.
for _function in REGISTRY.values():
    if _function.torch and _function.math and f"_print_{_function.sympy}" not in vars(TorchPrinter):
        setattr(TorchPrinter, f"_print_{_function.sympy}", _one_call(_function))


def _call_depth(code: str) -> int:
    """How deep calls nest in ``code``: 0 for ``a * b``, 1 for ``torch.exp(a)``, 2 for
    ``torch.addcmul(torch.exp(a), b, c)``."""
    def depth(node: ast.AST) -> int:
        inner = max((depth(child) for child in ast.iter_child_nodes(node)), default=0)
        return inner + isinstance(node, ast.Call)

    return depth(ast.parse(code, mode="eval").body)
