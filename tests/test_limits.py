"""Bounded work: a spec whose derivatives blow up fails fast with a problem naming its file, line,
the order reached and the size, instead of building for minutes; the examples build under the
default limits.

The blow-up is mish, nested, at order 8: about 19, 74, 360, 1,988, 12,049, 78,806 and 550,936
expression nodes at orders 1 to 7, and minutes to generate without limits.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from codegen import limits, pipeline
from codegen.errors import SpecErrors

REPO = Path(__file__).resolve().parent.parent
# expr on line 3, below a comment and the name, so that the line reported is checked
BLOW_UP = "# mish, nested, at order 8\nname: blowup\nexpr: x * tanh(softplus(x))\ninputs: [x]\norder: 8\nstrategy: nested\n"
PROBLEM = re.compile(
    r"^(?P<path>\S+):(?P<line>\d+): expr: symbolic work exceeded (?P<what>.+) at order (?P<order>\d) \(size (?P<size>\d+)\); "
    r"lower 'order', simplify 'expr', or raise the limit with (?P<option>--\S+)$"
)


def blow_up(folder: Path, name: str = "blowup") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(BLOW_UP.replace("name: blowup", f"name: {name}"))
    return path


def only_problem(errors: SpecErrors) -> re.Match:
    (problem,) = errors.problems
    match = PROBLEM.match(str(problem))
    assert match, str(problem)
    return match


# --- the library ------------------------------------------------------------------------------------


def test_the_size_limit_stops_a_blow_up_at_the_first_order_over_it(tmp_path):
    path = blow_up(tmp_path / "specs")
    start = time.monotonic()
    with pytest.raises(SpecErrors) as raised:
        pipeline.generate(path, root=tmp_path, limits=limits.Limits(seconds=60, size=1000))
    elapsed = time.monotonic() - start
    found = only_problem(raised.value)
    assert (found["path"], found["line"]) == ("specs/blowup.yaml", "3")
    assert found["what"] == "the size limit of 1000 nodes" and found["option"] == "--size-limit"
    assert int(found["size"]) > 1000 and 2 <= int(found["order"]) < 8
    assert elapsed < 30, f"{elapsed:.1f} s: the limit did not stop the work early"


def test_the_time_limit_stops_a_blow_up(tmp_path):
    path = blow_up(tmp_path / "specs")
    with pytest.raises(SpecErrors) as raised:
        pipeline.generate(path, root=tmp_path, limits=limits.Limits(seconds=0.5, size=0))
    found = only_problem(raised.value)
    assert found["what"] == "0.5 s" and found["option"] == "--time-limit"


def test_the_time_limit_interrupts_one_long_call_and_restores_the_alarm():
    """No hook runs inside one long SymPy call: the timer must stop it by itself."""
    previous = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    with pytest.raises(limits.LimitExceeded) as raised:
        with limits.enforced(limits.Limits(seconds=0.3, size=0)):
            while time.monotonic() - start < 10:  # a call that never reaches a hook (bounded, so
                pass                                # that a broken timer fails rather than hangs)
    elapsed = time.monotonic() - start
    assert raised.value.kind == "time" and 0.3 <= elapsed < 5
    assert signal.getsignal(signal.SIGALRM) is previous
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_work_that_ends_in_time_disarms_the_timer():
    previous = signal.getsignal(signal.SIGALRM)
    with limits.enforced(limits.Limits(seconds=0.2, size=0)):
        pass
    time.sleep(0.4)  # an alarm still armed would fire here and fail the test
    assert signal.getsignal(signal.SIGALRM) is previous


def test_outside_the_main_thread_the_deadline_is_checked_at_each_order():
    import sympy

    x = sympy.Symbol("x")
    caught = []

    def work():
        try:
            with limits.enforced(limits.Limits(seconds=0.2, size=0)):
                for order in range(1, 1000):
                    time.sleep(0.01)
                    limits.check(order, [x])
        except limits.LimitExceeded as exc:
            caught.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert caught and caught[0].kind == "time" and caught[0].order >= 1


def test_a_timer_someone_else_armed_is_left_alone():
    """pytest-timeout and others use SIGALRM too: dbgen then relies on its hooks only."""
    def theirs(signum, frame):
        raise AssertionError("their alarm fired")

    previous = signal.signal(signal.SIGALRM, theirs)
    signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        with limits.enforced(limits.Limits(seconds=0.1, size=0)):
            pass
        assert signal.getsignal(signal.SIGALRM) is theirs
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 25
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_without_a_budget_the_hook_does_nothing():
    import sympy

    limits.check(8, [sympy.Symbol("x") ** 100])


def test_messages():
    bounds = limits.Limits(seconds=60, size=20000)
    assert limits.LimitExceeded("size", bounds, 6, 22288).message() == (
        "symbolic work exceeded the size limit of 20000 nodes at order 6 (size 22288); "
        "lower 'order', simplify 'expr', or raise the limit with --size-limit"
    )
    assert limits.LimitExceeded("time", bounds, 0, 0).message().startswith(
        "symbolic work exceeded 60 s before the first derivative was done;"
    )


@pytest.mark.parametrize("strategy", ["auto", "nested"])
def test_the_examples_build_under_the_default_limits(strategy):
    """nested is the strategy that writes out every order: the heaviest for each example."""
    specs = pipeline.load_specs(pipeline.discover(REPO / "specs"), REPO)
    for spec in specs:
        pipeline.generate_one(dataclasses.replace(spec, strategy=strategy), limits=limits.DEFAULT)


# --- the command line -------------------------------------------------------------------------------


def dbgen(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    return result, time.monotonic() - start


def problems(result: subprocess.CompletedProcess) -> list[re.Match]:
    lines = result.stderr.splitlines()
    assert lines[-1].startswith("dbgen: ") and "nothing was written" in lines[-1], result.stderr
    matches = [PROBLEM.match(line) for line in lines[:-1]]
    assert all(matches), result.stderr
    return matches


@pytest.mark.parametrize("command, options, size_limit", [
    ("build", (), limits.DEFAULT.size),  # the defaults, as users get them
    ("check", ("--size-limit", "1000"), 1000),
])
def test_the_cli_reports_a_blow_up(tmp_path, command, options, size_limit):
    blow_up(tmp_path / "specs")
    result, elapsed = dbgen(command, "specs", "-o", "out", *options, cwd=tmp_path)
    assert result.returncode == 2
    (found,) = problems(result)
    assert (found["path"], found["line"]) == ("specs/blowup.yaml", "3")
    assert found["what"] == f"the size limit of {size_limit} nodes" and int(found["size"]) > size_limit
    assert elapsed < limits.DEFAULT.seconds, f"{elapsed:.0f} s"
    assert not (tmp_path / "out").exists()


def test_the_cli_time_limit_holds_in_every_worker(tmp_path):
    blow_up(tmp_path / "specs", "first")
    blow_up(tmp_path / "specs", "second")
    result, elapsed = dbgen("build", "specs", "-o", "out", "--time-limit", "1", "--size-limit", "0", "--jobs", "2",
                            cwd=tmp_path)
    assert result.returncode == 2
    found = problems(result)
    assert [m["path"] for m in found] == ["specs/first.yaml", "specs/second.yaml"]
    assert all(m["what"] == "1 s" and m["option"] == "--time-limit" for m in found)
    assert elapsed < 30, f"{elapsed:.0f} s: the time limit did not stop the workers"


def test_a_limit_of_zero_is_no_limit_and_a_negative_one_is_refused(tmp_path):
    spec = tmp_path / "specs" / "small.yaml"
    spec.parent.mkdir()
    spec.write_text("name: small\nexpr: x * tanh(softplus(x))\ninputs: [x]\norder: 3\nstrategy: nested\n")
    result, _ = dbgen("build", "specs", "-o", "out", "--time-limit", "0", "--size-limit", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for option in ("--time-limit", "--size-limit"):
        refused, _ = dbgen("build", "specs", "-o", "out", option, "-1", cwd=tmp_path)
        assert refused.returncode == 2 and option in refused.stderr
