"""Each target of ``dbgen audit`` imported and audited in a worker process, with a time limit.

A user's module may exit at import (``sys.exit``, ``os._exit``), hang, crash the interpreter, or
call ``sys.exit`` in forward: in dbgen's own process that ends the audit silently (exit 0, no
report) or hangs it, and hides the other targets of the run. ``run`` hands one job at a time to a
worker process (import a target and list its Functions; audit one Function) and waits at most
``Options.timeout`` seconds for each answer. A worker that exits, is killed by a signal or runs past
the limit is killed and its job reported in the job's place (an ``unchecked`` Audit: "exits at
import", "timed out", "exited"); the next job starts a fresh worker, which imports again what it
needs. Each target has workers of its own, one to list its Functions and one to audit them (which
keeps what it imported and torch's warm state from one Function to the next): what a target's
import changes in its process (the current folder, ``sys.modules``, a patched torch) never
reaches another target's audit. Every target is listed before any is audited.

On Linux the worker is forked from dbgen's process (torch is not imported again: a worker starts in
about 0.1 s), single-threaded (torch's OpenMP pool does not survive a fork: the child's first
parallel op would hang), once a backward has run in it (after a backward on a GPU in the parent,
autograd refuses to run in a forked child: the worker is then spawned). Elsewhere it is spawned: a
fresh interpreter, which imports torch (seconds, once per worker).

What a target prints goes to stderr (the worker's stdout is its stderr): it never mixes with the
report, and ``--json`` stays JSON.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path

from .targets import ImportFailure, NoFunctionError, TargetError

_START_LIMIT = 300.0  # seconds a worker may take to start (a spawned one imports torch)


def run(texts: Sequence[str], options, skipped=None) -> list:
    """``audit.run``: every Function of ``texts`` audited in a worker, in order (see the module)."""
    from .model import Audit

    if options.expr is not None:
        _check_expr(options.expr)
    for text in texts:
        _check_named(text)
    audits: list = []
    for item in _resolved(texts, options.timeout, skipped):
        audits.extend([item] if isinstance(item, Audit) else _functions_audited(*item, options))
    return audits


@contextlib.contextmanager
def _fresh_worker(timeout: float | None):
    """A worker for one target's jobs, stopped after them: what a target's import changes in its
    process (the current folder, sys.modules, a patched torch) never reaches another target."""
    worker = _Worker(timeout)
    try:
        yield worker
    except BaseException:
        worker.stop(politely=False)
        raise
    worker.stop()


def _resolved(texts: Sequence[str], timeout: float | None, skipped) -> list:
    """Per target, (text, [(name, file, line)] of its Functions) to audit, or the unchecked Audit of
    one whose import failed; a target with no Function skipped (``skipped(message)``), an error alone.
    Every target is resolved before any is audited, so that a mistyped one stops the run at once."""
    from .model import unchecked

    planned: list = []
    for text in texts:
        with _fresh_worker(timeout) as worker:
            answer = worker.ask(("resolve", text))
        if answer[0] == "targets":
            planned.append((text, answer[1]))
        elif answer[0] == "none":
            if len(texts) == 1:
                raise NoFunctionError(answer[1])
            if skipped is not None:
                skipped(answer[1])
        elif answer[0] == "usage":
            raise TargetError(answer[1])
        else:
            label, message, file, line = _import_trouble(text, answer, worker.timeout)
            planned.append(unchecked(text, label, message, file, line, shown=_shown(text)))
    if not planned:
        raise TargetError("no torch.autograd.Function subclass in " + ", ".join(texts))
    return planned


def _functions_audited(text: str, found, options) -> list:
    """The Audit of each Function ``found`` in target ``text``, asked of a worker of its own;
    unchecked where the worker's answer is trouble (exit, time, crash) or cannot be believed
    (``_doubt``). A Function that ends or hangs its worker leaves the next to a fresh one."""
    from .model import unchecked

    audits = []
    with _fresh_worker(options.timeout) as worker:
        for index, (name, file, line) in enumerate(found):
            answer = worker.ask(("audit", text, index, options))
            doubt = _doubt(answer, options) if answer[0] == "audit" else None
            if answer[0] == "audit" and doubt is None:
                audits.append(answer[1])
            elif doubt is not None:
                audits.append(unchecked(name, "audit tampered", doubt, file, line))
            else:
                label, message = _audit_trouble(answer, worker.timeout)
                audits.append(unchecked(name, label, message, file, line))
    return audits


def _doubt(answer: tuple, options) -> str | None:
    """Why the worker's audit cannot be believed, or None: the audited code runs in the worker and
    can change dbgen's own code there (a module that patches codegen.audit.verdict at import made a wrong
    Function 'ok'). Every verdict but unchecked rests on every order's check having run."""
    from .model import UNCHECKED, Audit

    audit = answer[1] if len(answer) > 1 else None
    if not isinstance(audit, Audit):
        return (f"the audit's answer is a {type(audit).__name__}, not an audit: the target changed dbgen's "
                "audit code in the worker (at import?); audit it apart from what patches dbgen")
    ran = {result.check for result in audit.results}
    needed = {"gradcheck", *(f"order {k}" for k in range(1, options.order + 1))}
    if audit.verdict != UNCHECKED and not needed <= ran:
        missing = ", ".join(sorted(needed - ran))
        return (f"verdict '{audit.verdict}' without the checks it rests on ({missing} never ran): the target "
                "changed dbgen's audit code in the worker (at import?); audit it apart from what patches dbgen")
    return None


def _check_expr(expr: str) -> None:
    """--expr that is not in the language is an argument error, whatever the targets."""
    from ..language.expr import ExprError, parse_expr

    try:
        parse_expr(expr, None, None)
    except ExprError as exc:
        raise TargetError(f"--expr: {exc}") from None


def _check_named(text: str) -> None:
    """A target that names nothing that can be found without running code (no such file, no such
    top-level module): an argument error before any worker starts. What needs an import to tell
    (no such class in it) the worker says."""
    where = text.rpartition(":")[0] if ":" in text else text
    if where.endswith(".py"):
        if not Path(where).is_file():
            raise TargetError(f"{where}: no such file")
        return
    import importlib.util

    top = where.split(".", 1)[0]
    try:
        found = top.isidentifier() and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise TargetError(f"{where}: cannot import it (no module named {top!r}); give a module on sys.path or a .py "
                          "file")


def _shown(text: str) -> str:
    """A target's name in the table where it is not a Function's (its import failed)."""
    where, _, attribute = text.rpartition(":") if ":" in text else (text, "", "")
    return attribute or (Path(where).name if where.endswith(".py") else where)


def _import_trouble(text: str, answer: tuple, timeout: float | None) -> tuple[str, str, str, int]:
    """(label, message, file, line) of a target whose import failed, hung or ended the worker."""
    where = text.rpartition(":")[0] if ":" in text else text
    if answer[0] == "failed":
        return answer[1:]
    if answer[0] == "timeout":
        message = f"importing {text} gave no answer in {timeout:g} s (--timeout): it hangs, or takes longer"
        return "hangs at import", message, where, 0
    message = f"importing {text} ended the process ({answer[1]}: os._exit, or a crash); nothing of it is audited"
    return "exits at import", message, where, 0


def _audit_trouble(answer: tuple, timeout: float | None) -> tuple[str, str]:
    """(label, message) of a Function whose audit failed, hung or ended the worker."""
    if answer[0] == "failed":
        return answer[1], answer[2]
    if answer[0] == "timeout":
        return "timed out", (f"its audit gave no answer in {timeout:g} s (--timeout): forward or backward hangs, "
                             "or is slower than that on the drawn inputs")
    return "exited", (f"auditing it ended the process ({answer[1]}): forward or backward calls os._exit, or "
                      "crashes the interpreter")


class _Worker:
    """The worker process: started on the first job, and again after one that ends or hangs it."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout or None  # 0 and None: no limit
        self.method = "fork" if sys.platform.startswith("linux") else "spawn"
        self.process = self.connection = None

    def ask(self, job: tuple) -> tuple:
        """The worker's answer to ``job``; ("timeout",) past the limit, ("died", how) where the worker
        ended; the worker is then stopped (the next job starts another)."""
        if self.process is None:
            self._start()
        try:
            self.connection.send(job)
        except OSError:  # it ended between two jobs: start another
            self.stop(politely=False)
            self._start()
            self.connection.send(job)
        ready = wait([self.connection, self.process.sentinel], self.timeout)
        if self.connection in ready:
            try:
                return self.connection.recv()
            except (EOFError, OSError):
                pass  # it ended: the sentinel says how
        if not ready:
            self.stop(politely=False)
            return ("timeout",)
        self.process.join(5)
        how = _how_it_ended(self.process.exitcode)
        self.stop(politely=False)
        return ("died", how)

    def stop(self, politely: bool = True) -> None:
        if self.process is None:
            return
        if politely and self.process.is_alive():
            try:
                self.connection.send(None)
                self.process.join(5)
            except OSError:
                pass
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.connection.close()
        self.process = self.connection = None

    def _start(self) -> None:
        if self.method == "fork" and _PROCESS["forked"]:
            _warm()  # not before the first: a run that stops at an argument error, or has one worker, gains nothing
        _PROCESS["forked"] = True
        context = multiprocessing.get_context(self.method)
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, self.method), name="dbgen-audit", daemon=True)
        self.process.start()
        child.close()
        ready = wait([self.connection, self.process.sentinel], _START_LIMIT)
        try:
            answer = self.connection.recv() if self.connection in ready else (f"no answer in {_START_LIMIT:g} s",)
        except (EOFError, OSError):
            self.process.join(5)
            answer = ("it ended:", _how_it_ended(self.process.exitcode))
        if answer == ("ready",):
            return
        self.stop(politely=False)
        if self.method == "fork":  # autograd refuses the fork: a fresh interpreter instead
            self.method = "spawn"
            self._start()
            return
        raise RuntimeError(f"dbgen audit: its worker process did not start: {' '.join(map(str, answer))}")


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "it did not end"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


_PROCESS = {"forked": False, "warm": False}  # this process: whether it has forked a worker, and warmed up
_AUDIT: dict = {}  # the worker's audit function, taken before it imports a target (``_serve``)


def _warm() -> None:
    """What every worker does first, done here once before forking the second worker of this
    process: import torch._dynamo (for the torch.compile check: 2.5 s) and audit a small Function
    of dbgen's own (each check's first run in a process: 0.6 s of the 0.7 s of a one-Function
    audit, measured). A worker started after one that died, and the workers of each later ``run``
    in this process (tests, a caller of ``audit.run``), then start warm."""
    if _PROCESS["warm"]:
        return
    _PROCESS["warm"] = True
    import torch._dynamo  # noqa: F401 - imports torch too

    from .model import Options
    from .targets import Target
    from .verdict import audit

    try:
        audit(Target(_warm_up_function(), "dbgen"), Options(order=2, shape=(2,)))
    except Exception:  # noqa: BLE001, S110 - only a warm-up: the workers do the checks
        pass


def _warm_up_function() -> type:
    """A correct Function with every rule (setup_context, jvp, vmap): each check runs to its end."""
    import torch

    class Square(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

        @staticmethod
        def jvp(ctx, tangent):
            (x,) = ctx.saved_tensors
            return 2 * x * tangent

    return Square


def _serve(connection, method: str) -> None:
    """The worker: answers jobs until it gets None (or its parent goes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's, which stops it
    try:
        sys.stdout.flush()
        os.dup2(2, 1)
    except (OSError, ValueError):
        pass
    sys.stdout = sys.stderr
    import torch

    from .dynamic import first_line
    from .verdict import audit

    _AUDIT["audit"] = audit  # bound before any target is imported: one that patches codegen.audit.verdict misses it
    if method == "fork":
        torch.set_num_threads(1)
    try:
        x = torch.ones(2, dtype=torch.float64, requires_grad=True)
        torch.autograd.grad((x * x).sum(), x, create_graph=True)
    except Exception as exc:  # noqa: BLE001 - autograd in a forked child after the parent's GPU backward
        connection.send(("unusable", first_line(exc)))
        return
    connection.send(("ready",))
    resolved: dict = {}
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        connection.send(_answer(job, resolved))


def _answer(job: tuple, resolved: dict) -> tuple:
    from .dynamic import first_line
    from .static import source_place
    from .targets import resolve

    if job[0] == "resolve":
        text = job[1]
        try:
            resolved[text] = resolve(text)
        except NoFunctionError as exc:
            return ("none", str(exc))
        except ImportFailure as exc:
            return ("failed", exc.label, str(exc), exc.file, exc.line)
        except TargetError as exc:
            return ("usage", str(exc))
        except BaseException as exc:  # noqa: BLE001 - the user's code, however it fails
            return ("failed", "raises at import", f"resolving {text} raised {first_line(exc)}", text, 0)
        return ("targets", [(target.name, *source_place(target.cls)) for target in resolved[text]])
    _, text, index, options = job
    try:
        if text not in resolved:  # a fresh worker, after one that ended
            resolved[text] = resolve(text)
        target = resolved[text][index]
    except BaseException as exc:  # noqa: BLE001 - imported again, it fails where it did not before
        message = f"importing {text} again (in a fresh worker) failed: {first_line(exc)}"
        return "failed", "raises at import", message
    return _audited(target, options)


def _audited(target, options) -> tuple:
    from .dynamic import first_line

    try:
        return ("audit", _AUDIT["audit"](target, options))
    except SystemExit as exc:
        message = f"calling it, or its backward, exits (sys.exit({exc.code!r})): nothing of it can be checked"
        return "failed", "exits when called", message
    except TargetError as exc:  # --expr in names the Function does not have
        return ("failed", "--expr", str(exc))
    except BaseException as exc:  # noqa: BLE001 - never an internal error for one target: its row says it
        return ("failed", "audit raised", f"auditing it raised {first_line(exc)}{_where(exc)}")


def _where(exc: BaseException) -> str:
    """ ' (at FILE:LINE)', the innermost frame of the traceback."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    if frame is None:
        return ""
    from .static import shown_path

    return f" (at {shown_path(frame.tb_frame.f_code.co_filename)}:{frame.tb_lineno})"
