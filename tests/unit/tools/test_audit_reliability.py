"""dbgen audit never passes what it could not check: a target that exits at
import, hangs, crashes its worker, has no inputs, is not finite on its domain, or whose replacing
spec would take a reserved name, is reported in its own row with a non-zero exit status, and the
other targets of the run are still audited; names are printed as written (no rich markup, no
emoji codes)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from helpers import run_dbgen

from codegen import audit as auditing
from codegen.spec import load_spec


def _function(name: str, forward: str, backward: str, before: str = "") -> str:
    """A module defining one old-style Function of one input x, saving x."""
    return textwrap.dedent(f"""\
        import os
        import sys
        import time

        import torch
        {before}

        class {name}(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                {forward}

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                {backward}
        """)


GOOD = _function("Square", "return x * x", "return 2 * x * grad")
WRONG = _function("Cubed", "return x ** 3", "return 2 * x * grad")  # 3 x^2 is right
NAN_ON_DEFAULT = _function("LogTimes100", "return torch.log(x)", "return 100 * grad / x")  # 1/x is right


def _write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _by_name(audits) -> dict[str, auditing.Audit]:
    return {a.function.rsplit(":", 1)[-1].rsplit("/", 1)[-1]: a for a in audits}


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)"])
def test_a_module_that_exits_at_import_is_reported_and_the_others_still_are(tmp_path, exit_call):
    good = _write(tmp_path, "good.py", GOOD)
    exits = _write(tmp_path, "exits.py", f"import os\nimport sys\n\n{exit_call}\n")
    result = run_dbgen(["audit", exits, good, "--json", "--order", "2"], tmp_path)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    rows = {item["function"].rsplit("/", 1)[-1]: item for item in json.loads(result.stdout)}
    assert rows["good.py:Square"]["verdict"] == "limited"
    row = rows["exits.py"]
    assert (row["verdict"], row["wrong_at_order"], row["correct_to_order"]) == ("unchecked", None, 0)
    assert "exit" in row["summary"] and row["findings"][-1]["kind"] == "error"
    if exit_call == "sys.exit(0)":  # the line it exits at
        assert row["findings"][-1]["line"] == 4 and "sys.exit(0)" in row["summary"]


def test_a_function_not_finite_on_the_default_domain_is_not_passed(tmp_path):
    path = _write(tmp_path, "nan.py", NAN_ON_DEFAULT)
    (audit,) = auditing.run([path], auditing.Options())
    assert (audit.verdict, audit.correct_to_order, audit.label) == ("unchecked", 0, "n/a: give --domain"), audit
    assert audit.summary.startswith("n/a: give --domain") and "x in [-2, 2]" in audit.summary
    (audit,) = auditing.run([path], auditing.Options(domains={"x": (0.5, 2.0)}))
    assert (audit.verdict, audit.wrong_at_order) == ("wrong", 1), audit.summary


def test_a_forward_that_never_returns_times_out_and_the_next_target_is_audited(tmp_path):
    hangs = _write(tmp_path, "hangs.py", _function("Hang", "while True: time.sleep(0.01)", "return grad"))
    hangs_at_import = _write(tmp_path, "slow_import.py", "import time\n\nwhile True:\n    time.sleep(0.01)\n")
    good = _write(tmp_path, "good.py", GOOD)
    started = time.monotonic()
    found = auditing.run([hangs, hangs_at_import, good], auditing.Options(order=1, timeout=2))
    assert time.monotonic() - started < 60
    audits = _by_name(found)
    assert (audits["Hang"].verdict, audits["Hang"].label) == ("unchecked", "timed out")
    assert "no answer in 2 s (--timeout)" in audits["Hang"].summary
    assert (audits["slow_import.py"].verdict, audits["slow_import.py"].label) == ("unchecked", "hangs at import")
    assert audits["Square"].verdict == "limited" and audits["Square"].correct_to_order == 1


def test_a_function_with_no_inputs_has_a_finding_not_an_internal_error(tmp_path):
    source = GOOD + textwrap.dedent("""

        class Constant(torch.autograd.Function):
            @staticmethod
            def forward(ctx):
                return torch.ones(3)

            @staticmethod
            def backward(ctx, grad):
                return ()
        """)
    audits = _by_name(auditing.run([_write(tmp_path, "constant.py", source)], auditing.Options(order=1)))
    constant = audits["Constant"]
    assert (constant.verdict, constant.label) == ("unchecked", "no inputs")
    (finding,) = [f for f in constant.findings if f.kind == "error"]
    assert finding.file.endswith("constant.py") and finding.line > 0 and "nothing to differentiate" in finding.message
    assert audits["Square"].verdict == "limited"


def test_expr_on_a_reserved_name_gives_a_spec_named_otherwise_and_the_run_goes_on(tmp_path):
    source = textwrap.dedent("""\
        import torch

        class Abs(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.abs()

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad * torch.sign(x)

        class Print(Abs):
            pass
        """)
    wrong = WRONG.replace("return x ** 3", "return x.abs() + 0.5")
    found = auditing.run([_write(tmp_path, "reserved.py", source), _write(tmp_path, "wrong.py", wrong)],
                         auditing.Options(expr="abs(x)"))
    audits = _by_name(found)
    assert audits["Cubed"].verdict == "wrong"
    for name, spec_name in (("Abs", "abs_fn"), ("Print", "print_fn")):
        audit = audits[name]
        assert audit.verdict == "limited" and audit.spec is not None, audit.summary
        assert f"# Named {spec_name}, not {spec_name[:-3]}: name '{spec_name[:-3]}' would shadow" in audit.spec
        path = tmp_path / "specs" / f"{spec_name}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(audit.spec)
        assert load_spec(path, path.name).name == spec_name


def test_names_are_printed_as_written_not_as_markup_or_emoji(tmp_path):
    path = _write(tmp_path / "[bold]ops", "up.py", WRONG.replace("class Cubed", "class Up"))
    result = run_dbgen(["audit", path, "--order", "1"], tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"{path}:Up: silently wrong at order 1" in result.stdout  # ':Up:' is rich's emoji code for 🆙
    assert "\N{SQUARED UP WITH EXCLAMATION MARK}" not in result.stdout
    assert "[bold]ops" in result.stdout


def test_a_run_of_a_good_a_wrong_and_a_hostile_target_reports_all_three(tmp_path):
    good = _write(tmp_path, "good.py", GOOD)
    wrong = _write(tmp_path, "wrong.py", WRONG)
    hostile = _write(tmp_path, "hostile.py", _function("Quits", "os._exit(3)", "return grad"))
    after = _write(tmp_path, "after.py", GOOD.replace("class Square", "class SquareAgain"))
    result = run_dbgen(["audit", good, hostile, wrong, after, "--order", "2"], tmp_path)
    assert result.returncode == 1, (result.stdout, result.stderr)  # wrong outranks not checked
    out = result.stdout
    for name, verdict in (("Square", "limited"), ("Quits", "exited"), ("Cubed", "wrong"), ("SquareAgain", "limited")):
        assert any(name in line and verdict in line for line in out.splitlines()), (name, out)
    assert f"{hostile}:Quits: not checked" in out and "exit status 3" in out
    assert f"{wrong}:Cubed: silently wrong at order 1" in out
    assert "4 Function(s) audited, 1 silently wrong, 1 not checked" in out


PATCH_THE_AUDIT = """
_A = sys.modules.get("codegen.audit.verdict")
if _A is not None:
    _A.audit = lambda t, o: _A.Audit(t.name, ("x",), (), (), "ok", None, o.order, "correct")
"""
PATCH_THE_CHECKS = """
for _name, _module in list(sys.modules.items()):
    if _name == "codegen.audit.dynamic":
        _module.gradchecks = _module.order_checks = _module.transform_checks = lambda *a, **k: []
"""


@pytest.mark.parametrize("patch, verdict", [(PATCH_THE_AUDIT, "wrong"), (PATCH_THE_CHECKS, "unchecked")])
def test_a_target_that_patches_the_audit_at_import_is_not_passed(tmp_path, patch, verdict):
    """The audited code runs in the worker, where it can change dbgen's own: the audit function is
    taken before any target is imported, and a verdict whose checks never ran is not believed."""
    path = _write(tmp_path, "faked.py", WRONG.replace("import torch\n", "import torch\n" + patch))
    (audit,) = auditing.run([path], auditing.Options())
    assert audit.verdict == verdict, audit.summary
    if verdict == "unchecked":
        assert audit.label == "audit tampered" and "never ran" in audit.summary


@pytest.mark.parametrize("relative", [True, False])
def test_a_target_that_changes_the_current_folder_cannot_change_what_the_next_one_is(tmp_path, monkeypatch,
                                                                                      relative):
    """a.py moves the process into other/, which holds a correct class of the same file name and class
    name as the wrong one named next: the next target is still the one named (each target has
    workers of its own), and a.py's own import is not blamed for dbgen's bookkeeping."""
    other = tmp_path / "other"
    _write(other, "b.py", WRONG.replace("Cubed", "Bad").replace("return 2 * x * grad", "return 3 * x * x * grad"))
    _write(tmp_path, "b.py", WRONG.replace("Cubed", "Bad"))
    mover = _write(tmp_path, "a.py", GOOD + f"\nos.chdir({str(other)!r})\n")
    monkeypatch.chdir(tmp_path)
    audits = _by_name(auditing.run(["a.py" if relative else mover, "b.py"], auditing.Options(order=2)))
    assert (audits["Bad"].verdict, audits["Bad"].wrong_at_order) == ("wrong", 1), audits["Bad"].summary
    assert audits["Square"].verdict == "limited", audits["Square"].summary


def test_a_target_that_replaces_a_module_cannot_change_what_the_next_one_is(tmp_path, monkeypatch):
    """a.py puts a correct Bad in sys.modules['bmod'] at import; the wrong bmod:Bad named next is
    still the one audited."""
    _write(tmp_path, "bmod.py", WRONG.replace("Cubed", "Bad"))
    faker = _write(tmp_path, "a.py", GOOD + textwrap.dedent("""
        import types
        fake = types.ModuleType("bmod")
        fake.Bad = Square
        sys.modules["bmod"] = fake
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # a spawned worker's sys.path
    audits = _by_name(auditing.run([faker, "bmod:Bad"], auditing.Options(order=2)))
    assert (audits["bmod.Bad"].verdict, audits["bmod.Bad"].wrong_at_order) == ("wrong", 1), audits


def test_a_backward_wrong_near_the_domains_end_is_found(tmp_path):
    """Wrong on (1.8, 2] only, a twentieth of the default domain: six drawn points missed it (ok,
    exit 0); the grid over the domain, its ends a thousandth inside, does not."""
    path = _write(tmp_path, "edge.py", _function("WrongEdge", "return x * x",
                                                  "return grad * torch.where(x > 1.8, 3 * x, 2 * x)"))
    (audit,) = auditing.run([path], auditing.Options())
    assert audit.verdict == "wrong" and audit.wrong_at_order == 1, audit.summary


@pytest.mark.parametrize("where", ["(x > 0.55) & (x < 0.63)", "(x > -1.0) & (x < -0.92)"])
def test_a_backward_wrong_inside_the_domain_between_six_points_is_found(tmp_path, where):
    """Wrong on a fiftieth of [-2, 2] inside it, between the points of a six-point grid (+-0.4, +-1.2,
    +-2): the grid over the domain has 256 points (dynamic.GRID_POINTS), whatever the shape."""
    body = f"return grad * torch.where({where}, 3 * x, 2 * x)"
    path = _write(tmp_path, "inside.py", _function("WrongInside", "return x * x", body))
    (audit,) = auditing.run([path], auditing.Options())
    assert audit.verdict == "wrong" and audit.wrong_at_order == 1, audit.summary


def test_a_class_name_with_colons_is_shown_whole_in_the_table(tmp_path):
    """The table's Function cell is the class's name after the file's '.py:' (it was cut at its
    last colon: a class named ':smile:' showed an empty cell)."""
    path = _write(tmp_path, "smile.py", WRONG + 'Cubed.__name__ = Cubed.__qualname__ = ":smile:"\n')
    result = run_dbgen(["audit", path, "--order", "1"], tmp_path)
    row = next(line for line in result.stdout.splitlines() if "smile.py:" in line and "│" in line)
    assert row.split("│")[1].strip() == ":smile:", row
