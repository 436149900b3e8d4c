"""Bounds on the symbolic work of one spec: a time limit and a size limit per derivative order.

Derivatives grow geometrically with their order: ``exp(exp(exp(x)))`` with three inputs, nested,
has 13, 55, 230, 985, 4,523, 22,288, 117,600 and 661,757 expression nodes at orders 1 to 8, and
SymPy's time grows with them (minutes in all). The examples stay under 4,300 nodes per order, the
project's tests under 6,700. So:

- size: the derivatives of each order are measured (expression tree nodes) where they are
  produced, ``symbolic.partial_derivatives`` and each level of ``plan._nested``; one order over
  the limit stops the spec. Memory needs no limit of its own (RLIMIT_AS would need a process per
  spec): SymPy shares repeated subexpressions (an unlimited build of the blow-up above peaks at
  76 MB), and an order is only ever computed from one under the limit.
- time: a deadline, checked at the same points, and a hard stop for one long SymPy call: a
  one-shot ``SIGALRM`` timer raising ``LimitExceeded`` in the thread doing the work (where the
  platform has ``setitimer`` and the work runs in a main thread, which ``--jobs`` workers do).
  ``LimitExceeded`` is a ``BaseException`` so that SymPy's ``except Exception`` cannot swallow it.

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


@dataclass(frozen=True)
class Limits:
    """Per-spec bounds; 0 means no limit. Measured, the examples need at most 4,224 nodes per
    order and 2.4 s per spec under any strategy, the tests (property tests included) 6,678 nodes
    and 3.2 s; a blow-up like exp(exp(exp(x))) nested at order 8 reaches 22,288 at order 6."""

    seconds: float = 60.0
    size: int = 20_000


DEFAULT = Limits()
NONE = Limits(seconds=0, size=0)


class LimitExceeded(BaseException):
    """A spec's symbolic work went past a limit: which one, the order reached and its size."""

    def __init__(self, kind: str, limits: Limits, order: int, size: int):
        super().__init__(kind, order, size)
        self.kind, self.limits, self.order, self.size = kind, limits, order, size

    def message(self) -> str:
        """The spec problem, after 'expr: ': what was exceeded, where, and what to do."""
        if self.kind == "size":
            what, option = f"the size limit of {self.limits.size} nodes", "--size-limit"
        else:
            what, option = f"{self.limits.seconds:g} s", "--time-limit"
        where = f"at order {self.order} (size {self.size})" if self.order else "before the first derivative was done"
        return (f"symbolic work exceeded {what} {where}; lower 'order', simplify 'expr', "
                f"or raise the limit with {option}")


class Budget:
    """The running account of one spec: its deadline and the highest order reached, with its size."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds if limits.seconds else None
        self.order = 0
        self.size = 0

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
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise self.timed_out()

    def timed_out(self) -> LimitExceeded:
        return LimitExceeded("time", self.limits, self.order, self.size)


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("dbgen_budget", default=None)


def check(order: int, exprs) -> None:
    """The hook where derivatives of ``order`` are produced: raises ``LimitExceeded`` past a limit."""
    budget = _current.get()
    if budget is not None:
        budget.check(order, exprs)


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
    """A one-shot SIGALRM at the deadline, raising in the thread doing the work; nothing where it
    cannot be had (no setitimer, not the main thread, or a timer already in use by someone else,
    pytest-timeout say): the hooks' deadline checks still apply there."""
    if budget.deadline is None or not _alarm_available():
        yield
        return

    def on_alarm(signum, frame):
        raise budget.timed_out()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(budget.deadline - time.monotonic(), 1e-3))
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous)


def _alarm_available() -> bool:
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )
