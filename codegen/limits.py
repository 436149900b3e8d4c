"""Bounds on the symbolic work of one spec: a time limit and a size limit per derivative order.

Derivatives grow geometrically with their order: ``exp(exp(exp(x)))`` with three inputs, nested,
has 13, 55, 230, 985, 4,523, 22,288, 117,600 and 661,757 expression nodes at orders 1 to 8, and
SymPy's time grows with them (minutes in all). The examples stay under 4,300 nodes per order, the
project's tests under 6,700; real three-input functions at order 3 need more, nested: TorchANI's
angular term 17,801 to 18,789 depending on how it is written (tests/unit/derive/test_limits.py;
reported 22,246 for a spelling not reproduced here). The default
size limit, 50,000, leaves those room and still stops the blow-ups in seconds (measured, one core):
mish nested at order 8 at order 6 (78,806 nodes) in 1.6 s, exp(exp(exp(x))) at order 7 (117,574)
in 3.2 s, both under 65 MB; at 100,000 mish goes on to order 7 (550,936 nodes) and takes 10 s. So:

- size: the derivatives of each order are measured (expression tree nodes) where they are
  produced, ``symbolic.partial_derivatives``, each level of ``plan.nested._nested`` and a single level's
  backward (order 1); one order over the limit stops the spec (or, in an attempt, that attempt). Memory needs no limit of its own (RLIMIT_AS would need a process per
  spec): SymPy shares repeated subexpressions (an unlimited build of the blow-up above peaks at
  76 MB), and an order is only ever computed from one under the limit.
- time: a deadline in the process's CPU time (``now``), checked at the same points, and a hard
  stop for one long SymPy call: a one-shot CPU-time timer (``ITIMER_PROF``, ``SIGPROF``) raising
  ``LimitExceeded`` in the thread doing the work (where the platform has ``setitimer`` and the
  work runs in a main thread, which ``--jobs`` workers do). CPU time, not the wall clock: a spec
  near the limit must not build on an idle laptop and fail on a loaded CI machine; the
  build process does one spec's symbolic work at a time, so its CPU time is that work's.
  ``LimitExceeded`` is a ``BaseException`` so that SymPy's ``except Exception`` cannot swallow it.
- optional work (``attempt``): ``auto`` plans each candidate strategy as an attempt that may use
  a share of the time left; a candidate past a limit is dropped (``plan.make_plan``) and the spec
  keeps the rest of its time for the others. The spec fails only when no candidate fits.

A hook costs nothing when no budget is active (the generator used as a library without limits).
SymPy is imported only when a size is measured, so loading this module stays cheap.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from dataclasses import dataclass

# The clock of the time limit and its timer: the process's CPU time (see the module docstring).
now = time.process_time
TIMER, TIMER_SIGNAL = (signal.ITIMER_PROF, signal.SIGPROF) if hasattr(signal, "ITIMER_PROF") else (None, None)


@dataclass(frozen=True)
class Limits:
    """Per-spec bounds; 0 means no limit. Measured, the examples need at most 4,224 nodes per
    order and 2.4 s per spec under any strategy, the tests (property tests included) 6,678 nodes
    and 3.2 s, TorchANI's angular term nested at order 3 up to 18,789 nodes (22,246 reported) and 8 s; a blow-up like
    exp(exp(exp(x))) nested at order 8 reaches 22,288 at order 6 and 117,574 at order 7."""

    seconds: float = 60.0
    size: int = 50_000


DEFAULT = Limits()
NONE = Limits(seconds=0, size=0)


class LimitExceeded(BaseException):
    """A spec's symbolic work went past a limit: which one, the order reached and its size."""

    def __init__(self, kind: str, limits: Limits, order: int, size: int):
        super().__init__(kind, order, size)
        self.kind, self.limits, self.order, self.size = kind, limits, order, size

    def message(self) -> str:
        """The spec problem, after 'expr: ': what was exceeded, where, and what to do."""
        return f"symbolic work exceeded {self.what()} {self.where()}; {self.advice()}"

    def what(self) -> str:
        if self.kind == "size":
            return f"the size limit of {self.limits.size} nodes"
        return f"{self.limits.seconds:g} s of CPU time"

    def where(self) -> str:
        return f"at order {self.order} (size {self.size})" if self.order else "before the first derivative was done"

    def dropped(self) -> str:
        """Why ``auto`` left a candidate out, for its reason line (STRATEGY's docstring, show)."""
        what = self.what() if self.kind == "size" else f"its share of the {self.what()} time limit"
        return f"over {what} {self.where()}"

    def advice(self) -> str:
        option = "--size-limit" if self.kind == "size" else "--time-limit"
        return f"lower 'order', simplify 'expr', or raise the limit with {option}"


class NoCandidateFits(LimitExceeded):
    """``auto`` found no candidate strategy within the limits: each one's ``LimitExceeded``, by name."""

    def __init__(self, exceeded: dict[str, LimitExceeded]):
        last = list(exceeded.values())[-1]
        super().__init__(last.kind, last.limits, last.order, last.size)
        self.exceeded = exceeded

    def message(self) -> str:
        tried = "; ".join(f"{strategy}: {e.what()} {e.where()}" for strategy, e in self.exceeded.items())
        return f"symbolic work exceeded a limit under every strategy auto tried ({tried}); {self.advice()}"


class Budget:
    """The running account of one spec: its deadline and the highest order reached, with its size."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.deadline = now() + limits.seconds if limits.seconds else None
        self.order = 0
        self.size = 0
        self.alarm = False  # whether a timer is armed for the deadline (``_alarm``)

    def check(self, order: int, exprs) -> None:
        size = tree_size(exprs)
        if order > self.order:
            self.order, self.size = order, size
        elif order == self.order:
            self.size = max(self.size, size)
        if self.limits.size and size > self.limits.size:
            raise LimitExceeded("size", self.limits, order, size)
        self.check_time()

    def check_time(self) -> None:
        if self.deadline is not None and now() > self.deadline:
            raise self.timed_out()

    def timed_out(self) -> LimitExceeded:
        return LimitExceeded("time", self.limits, self.order, self.size)

    @contextlib.contextmanager
    def attempt(self, share: float):
        """Optional work: its own account of orders and sizes, and a deadline at ``share`` of the
        time left; past it, ``LimitExceeded`` ends the attempt and the outer deadline holds again."""
        outer = (self.deadline, self.order, self.size)
        self.order = self.size = 0
        if self.deadline is not None:
            started = now()
            self.deadline = started + share * max(self.deadline - started, 0.0)
            self._rearm()
        try:
            yield self
        finally:
            self.deadline, self.order, self.size = outer
            self._rearm()

    @contextlib.contextmanager
    def paused(self):
        """Work that is not the spec's symbolic work (the accuracy oracle measuring a candidate):
        the deadline moves by the time it takes."""
        if self.deadline is None:
            yield self
            return
        left = self.deadline - now()
        self.deadline = None
        if self.alarm:
            signal.setitimer(TIMER, 0)
        try:
            yield self
        finally:
            self.deadline = now() + left
            self._rearm()

    def _rearm(self) -> None:
        if self.alarm:
            signal.setitimer(TIMER, max(self.deadline - now(), 1e-3))


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("dbgen_budget", default=None)


def check(order: int, exprs) -> None:
    """The hook where derivatives of ``order`` are produced: raises ``LimitExceeded`` past a limit."""
    budget = _current.get()
    if budget is not None:
        budget.check(order, exprs)


@contextlib.contextmanager
def attempt(share: float = 0.5):
    """``Budget.attempt`` of the spec's budget; a plain block when no budget is active."""
    budget = _current.get()
    if budget is None:
        yield None
        return
    with budget.attempt(share):
        yield budget


@contextlib.contextmanager
def paused():
    """``Budget.paused`` of the spec's budget, whose hooks check nothing in the block (the oracle's
    own derivatives are not the plan's); a plain block when no budget is active."""
    budget = _current.get()
    if budget is None:
        yield None
        return
    with budget.paused():
        token = _current.set(None)
        try:
            yield budget
        finally:
            _current.reset(token)


def tree_size(exprs) -> int:
    """Nodes in the expression trees of ``exprs`` (a shared subtree counts each time it appears,
    as printing and CSE see it). Linear in the size, like the differentiation that made them."""
    from sympy import preorder_traversal

    return sum(1 for expr in exprs for _ in preorder_traversal(expr))


@contextlib.contextmanager
def enforced(limits: Limits):
    """Run the body under ``limits``: the hooks check it, and a timer stops a long SymPy call."""
    budget = Budget(limits)
    token = _current.set(budget)
    try:
        with _alarm(budget):
            yield budget
    finally:
        _current.reset(token)


@contextlib.contextmanager
def _alarm(budget: Budget):
    """A one-shot CPU-time timer at the deadline, raising in the thread doing the work; nothing
    where it cannot be had (no setitimer, not the main thread, or the timer already in use by
    someone else, a profiler say): the hooks' deadline checks still apply there."""
    if budget.deadline is None or not _alarm_available():
        yield
        return

    def on_alarm(signum, frame):
        raise budget.timed_out()

    previous = signal.signal(TIMER_SIGNAL, on_alarm)
    try:
        budget.alarm = True
        budget._rearm()
        yield
    finally:
        budget.alarm = False
        try:
            signal.setitimer(TIMER, 0)
        finally:
            signal.signal(TIMER_SIGNAL, previous)


def _alarm_available() -> bool:
    return (
        hasattr(signal, "setitimer")
        and TIMER is not None
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(TIMER) == (0.0, 0.0)
    )
