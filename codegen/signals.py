"""SIGINT and SIGTERM held back where an interruption would do harm: while a build swaps files in,
and while torch is imported.

A leaf: the writer, the pipeline, the native probe and the CLI use it; it imports nothing of dbgen's.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing.Self is Python 3.11's; annotations are not evaluated
    from typing import Self


class Interrupted(BaseException):
    """SIGINT or SIGTERM stopped dbgen (the CLI turns both into this; exit 128 + signum)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class HeldSignals:
    """SIGINT and SIGTERM held back while files are swapped, so that the swap is checked between
    steps and a rollback is never itself interrupted. On exit the signal is delivered to the
    handler there was before (the CLI's, KeyboardInterrupt, or the default: the process ends)."""

    SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                previous = signal.getsignal(signum)
                if previous not in (signal.SIG_IGN, None):
                    self._previous[signum] = signal.signal(signum, self._note)
        return self

    def _note(self, signum, frame) -> None:
        if self.received is None:  # a second Ctrl-C during the rollback changes nothing
            self.received = signum

    def check(self) -> None:
        """Raise at a step boundary if a signal came in, so that the swap is undone."""
        if self.received is not None:
            raise Interrupted(self.received)

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self.received is not None:
            signal.raise_signal(self.received)
            raise Interrupted(self.received)  # the previous handler returned: still, nothing was written


def import_torch():
    """``torch``, imported with SIGINT and SIGTERM held (``HeldSignals``) and delivered after.

    A signal whose handler raises inside torch's import is lost (the build runs on, measured: a
    SIGTERM 0-1 s into a build under load was ignored 2 times in 12) or aborts the process
    (SIGABRT); held, it stops dbgen as anywhere else, once the import is done."""
    with HeldSignals():
        import torch
    return torch
