"""The accuracy oracle: each derivative order's error in bits against exact arithmetic.

The generated tests compare a Function with autograd through the composed formula in the same
floating-point arithmetic, so what both lose goes unseen. Here the truth is exact: every partial
derivative up to the spec's order is differentiated by SymPy from the formula as the user wrote it
and evaluated by mpmath at two precisions (kept where they agree). The Function under test is run
with autograd on the same points, in float64 and float32.

Error is counted as Herbie counts it, in bits: log2(1 + the number of floats of the result's dtype
between the result and the truth rounded to that dtype); a NaN or inf where the truth is finite
counts as every bit lost (64 or 32).

Conditioning. The points are floats and exact, but the generated code rounds its first operations
(k * r, x / c) and an ill-conditioned formula amplifies that: sin(pi * x) near x = 1 loses bits in
any arithmetic. A point's condition number is sum_v |v * dg/dv / g| over the inputs and params v
(estimated exactly, by a relative step of 1e-20 at the higher precision); an algorithm whose error
is at most a few roundings of its inputs has error at most about kappa ulps. The bits lost beyond
that, ``excess = max(0, bits - log2(max(1, kappa)))``, are what a better formula could recover, and
what the bound (``BOUND_BITS``) applies to. Points where the truth is 0, subnormal or outside the
dtype's range are left out of the excess (a relative error means nothing there).

Sampling follows Herbie: per input, points uniform over the float bit patterns of its domain (so
1e-150 and 1e-8 are drawn as often as 1 and 3), points uniform in value, the domain's ends, 0, and
the thresholds where a branch changes (``where``, comparisons), each with its neighbours.

Cost. Near 0 the truth needs more digits (``_extra_digits``: 8 per decade below 1e-3, 2,400 at
1e-300), which elementary functions afford and mpmath's Bessel, gamma-family and zeta functions
(SciPy's externals through mpmath too) do not: bessel_y1 at 1e-30 takes 2.5 s at 100 digits, 3
minutes at 1,200, and a build stalled on it. A formula holding one of those (``_slow``) is judged
only at points whose inputs and params are 0 or at least ``SLOW_SMALLEST`` in magnitude (at most
48 extra digits): the rule is by value, not by time, so the same spec measures the same on any
machine.

The oracle's parts: ``exact`` (mpmath's truth and condition numbers), ``points`` (where to
measure), ``floats`` (bits between floats), ``error`` (the measurement, the reference domain) and
``report`` (text, JSON, plot).
"""

from .error import (
    BOUND_BITS,
    Oracle,
    Report,
    excess,
    measure,
    reference_domain,
    scipy_bits,
)
from .exact import DIGITS, SLOW_SMALLEST, exact
from .floats import bits
from .points import sample
from .report import report_json, report_text, write_plot

__all__ = [
    "BOUND_BITS", "DIGITS", "SLOW_SMALLEST", "Oracle", "Report", "bits", "exact", "excess", "measure",
    "reference_domain", "report_json", "report_text", "sample", "scipy_bits", "write_plot",
]
