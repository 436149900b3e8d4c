"""A time bound on one removable part's analysis: an attempt of the spec's budget when one is
active, else a timer of its own, and ``_tick`` between steps either way.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading

from .. import limits


class _TooLong(BaseException):
    """A part's analysis went past SECONDS (a BaseException, as limits.LimitExceeded, so that
    SymPy's ``except Exception`` cannot swallow it)."""


# -- the time bound -------------------------------------------------------------------------------


_until: contextvars.ContextVar[float | None] = contextvars.ContextVar("dbgen_series_until", default=None)


@contextlib.contextmanager
def _bounded(seconds: float):
    """Run the body for at most ``seconds``: as an attempt of the spec's time budget when one is
    active (its timer raises limits.LimitExceeded, which ends the attempt only), else by a timer
    of its own where one can be had (raising _TooLong); and ``_tick`` raises _TooLong between
    steps past it either way."""
    token = _until.set(limits.now() + seconds)
    try:
        budget = limits._current.get()
        if budget is not None and budget.deadline is not None:
            left = budget.deadline - limits.now()
            try:
                with limits.attempt(1.0 if left <= seconds else seconds / left):
                    yield
            except limits.LimitExceeded:
                budget.check_time()  # the spec's own deadline passed: that still ends the spec
                raise
        elif budget is None and _timer_available():
            def on_alarm(signum, frame):
                raise _TooLong()

            previous = signal.signal(limits.TIMER_SIGNAL, on_alarm)
            try:
                signal.setitimer(limits.TIMER, seconds)
                yield
            finally:
                signal.setitimer(limits.TIMER, 0)
                signal.signal(limits.TIMER_SIGNAL, previous)
        else:
            yield
    finally:
        _until.reset(token)


def _tick() -> None:
    """Raise _TooLong where the part's analysis is past its time (``_bounded``)."""
    until = _until.get()
    if until is not None and limits.now() > until:
        raise _TooLong()


def _timer_available() -> bool:
    return (hasattr(signal, "setitimer") and limits.TIMER is not None
            and threading.current_thread() is threading.main_thread()
            and signal.getitimer(limits.TIMER) == (0.0, 0.0))
