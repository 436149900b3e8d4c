"""``dbgen bench``: its measures on hand-checked cases, and a quick run of the command as CI can afford.

The measures are checked on functions whose answer is known without bench: ``torch.exp`` runs one
kernel and saves its result (4*N bytes in float32); views and detach run none; the composed mish
dispatches softplus, tanh and mul forward and five kernels backward.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from codegen.cli import app
from codegen.spec import Spec
from codegen.tools import bench

REPO = Path(__file__).resolve().parents[3]
N = 1000
CANDIDATES = {"composed", "auto", "save_inputs", "save_outputs", "intermediates", "nested"}
# autograd through x*tanh(softplus(x)), value and first-order gradient, kernel by kernel
MISH_FORWARD = Counter({"softplus": 1, "tanh": 1, "mul": 1})
MISH_BACKWARD = Counter({"mul": 2, "tanh_backward": 1, "softplus_backward": 1, "add": 1})


def mish_by_hand(x):
    return x * torch.tanh(F.softplus(x))


def one_input_spec(lo=-2.0, hi=2.0) -> Spec:
    return Spec(path="t.yaml", name="t", expr="exp(x)", inputs=("x",), order=3, domain=(("x", (lo, hi)),))


# ------------------------------------------------------------------ the measures, by hand


def test_op_counter_counts_one_kernel_for_exp_and_none_for_views():
    x = torch.rand(N)
    assert bench.count_ops(lambda: torch.exp(x)) == 1
    assert bench.count_ops(lambda: x.view(10, 100).t().expand(2, 100, 10).detach()) == 0
    assert bench.count_ops(lambda: torch.exp(x.view(10, 100)[3])) == 1


def test_op_counter_sees_the_backward_kernels():
    x, cotangent = torch.rand(N, requires_grad=True), torch.rand(N)
    with bench.OpCounter() as counter:
        torch.autograd.grad(mish_by_hand(x), x, cotangent)
    assert counter.ops == MISH_FORWARD + MISH_BACKWARD


@pytest.mark.parametrize("dtype, itemsize", [(torch.float32, 4), (torch.float64, 8)])
def test_saved_bytes_of_exp_is_its_result(dtype, itemsize):
    x = torch.rand(N, dtype=dtype, requires_grad=True)
    saved, out = bench.saved_bytes(lambda: torch.exp(x))
    assert saved == itemsize * N
    assert out.shape == (N,)


def test_saved_bytes_leaves_out_the_excluded_storages_and_counts_a_storage_once():
    x = torch.rand(N, requires_grad=True)
    assert bench.saved_bytes(lambda: torch.sin(x))[0] == 4 * N  # sin saves its input
    assert bench.saved_bytes(lambda: torch.sin(x), exclude={x.untyped_storage().data_ptr()})[0] == 0
    assert bench.saved_bytes(lambda: x * x)[0] == 4 * N  # both factors are x: one storage


def test_graph_nodes_counts_unique_nodes_down_to_the_leaves():
    x = torch.rand(N, requires_grad=True)
    y = torch.exp(x)
    assert bench.graph_nodes([y]) == 2  # ExpBackward0, AccumulateGrad
    assert bench.graph_nodes([y.sin() + y.cos()]) == 5  # Add, Sin, Cos, Exp, AccumulateGrad
    assert bench.graph_nodes([x.detach()]) == 0


def test_graph_measures_of_exp():
    inputs = bench.make_inputs(one_input_spec(), N, torch.float32)
    measures = bench.graph_measures(torch.exp, inputs)
    assert measures["W2"] == (4 * N, 2)  # forward saves exp(x)
    # the first backward, grad_out*exp(x) with create_graph: exp(x) again (already counted) and the
    # cotangent (left out); the graph of the gradient: Mul, Exp, AccumulateGrad
    assert measures["W3"] == (4 * N, 3)


def test_workloads_are_the_derivative_orders():
    inputs = bench.make_inputs(one_input_spec(0.5, 1.5), N, torch.float64)
    (x,), cot = inputs.tensors, inputs.cotangents
    assert (x >= 0.5).all() and (x <= 1.5).all() and x.requires_grad
    value = torch.exp(x.detach())
    expected = [value, value * cot[0][0], value * cot[0][0] * cot[1][0], value * cot[0][0] * cot[1][0] * cot[2][0]]
    for order, want in enumerate(expected):
        (got,) = bench.workload(torch.exp, inputs, order)()
        torch.testing.assert_close(got, want)
        assert not got.requires_grad


def test_a_vanishing_derivative_ends_the_chain():
    inputs = bench.make_inputs(one_input_spec(), N, torch.float32)
    assert bench.derivatives(lambda x: 2 * x, inputs, 2) == ()


def test_median_times_interleaves_and_loops_short_calls():
    calls = []
    times = bench.median_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3)
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
    assert calls.count("a") > 100 and calls.count("b") > 100  # a call this short is looped within a sample


def test_summary_is_a_geometric_mean():
    def row(spec, candidate, seconds, ops):  # composed takes 1 s everywhere, so the ratio is the time
        return bench.Row(spec, "W3", candidate, "", False, seconds, seconds, 1.0, ops)

    rows = [row("a", "composed", 1.0, 10), row("a", "nested", 4.0, 40),
            row("b", "composed", 1.0, 10), row("b", "nested", 1.0, 10), row("b", "native", 0.5, 5)]
    summaries = {s.candidate: s for s in bench.summarize(rows)}
    assert summaries["nested"].time_ratio == pytest.approx(2.0)
    assert summaries["nested"].op_ratio == pytest.approx(2.0)
    assert (summaries["nested"].native_specs, summaries["nested"].time_vs_native) == (1, pytest.approx(2.0))
    assert summaries["native"].specs == 1


def test_plot_is_skipped_without_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    results = bench.Results(bench.Config(), Path("specs"), 1.0)
    assert "matplotlib" in bench.write_plot(results, tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


# ------------------------------------------------------------------ arguments


@pytest.mark.parametrize(
    "args, message",
    [
        (["--orders", "1,4"], "--orders"),
        (["--orders", "x"], "--orders"),
        (["--strategies", "auto,fast"], "--strategies"),
        (["--size", "0"], "--size"),
        (["--dtype", "int32"], "--dtype"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message, tmp_path):
    result = CliRunner().invoke(app, ["bench", str(REPO / "specs" / "square.yaml"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_bad_spec_exits_2_like_build(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: bad\nexpr: x ^ 2\ninputs: [x]\norder: 2\n")
    result = CliRunner().invoke(app, ["bench", str(tmp_path), "--report", str(tmp_path / "r.md")])
    assert result.exit_code == 2
    assert "bad.yaml:2:" in result.output
    assert not (tmp_path / "r.md").exists()


def test_an_unknown_native_op_exits_2(tmp_path):
    (tmp_path / "f.yaml").write_text("name: f\nexpr: exp(x)\ninputs: [x]\norder: 1\nnative: torch.no_such_op\n")
    result = CliRunner().invoke(app, ["bench", str(tmp_path), "--report", str(tmp_path / "r.md")])
    assert result.exit_code == 2
    assert "f.yaml:5: native: torch.no_such_op is not defined by torch" in result.output


def test_bench_writes_no_file_unless_asked(tmp_path, monkeypatch):
    """By default the tables go to stdout and nothing is written into the user's folder (it wrote
    bench/report.md and bench/plot.png there); --report and --plot write where they say."""
    calls = []
    monkeypatch.setattr(bench, "run", lambda specs, config, echo: echo("the tables") or "results")
    monkeypatch.setattr(bench, "write_report", lambda results, path: calls.append(("report", path)))
    monkeypatch.setattr(bench, "write_plot", lambda results, path: calls.append(("plot", path)))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["bench", str(REPO / "specs" / "square.yaml")])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == [] and calls == []
    assert result.stdout == "the tables\ndbgen: nothing written; add --report FILE (markdown) and --plot FILE (PNG) to keep them\n"
    result = CliRunner().invoke(app, ["bench", str(REPO / "specs" / "square.yaml"), "--report", "out/r.md"])
    assert result.exit_code == 0, result.output
    assert calls == [("report", Path("out/r.md"))]
    assert result.stdout.splitlines()[-1] == "dbgen: report written to out/r.md"


# ------------------------------------------------------------------ the command, small


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """``dbgen bench`` on mish (order lowered to 2, so W4 is above it) and gaussian_rbf, 4096 elements."""
    tmp = tmp_path_factory.mktemp("bench")
    specs = tmp / "specs"
    specs.mkdir()
    (specs / "mish.yaml").write_text((REPO / "specs" / "mish.yaml").read_text().replace("order: 3", "order: 2"))
    (specs / "gaussian_rbf.yaml").write_text((REPO / "specs" / "gaussian_rbf.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "codegen", "bench", "specs", "--size", "4096", "--repeats", "2",
         "--report", "out/report.md", "--plot", "out/plot.png"],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=300, check=False)
    return tmp, result


def report_rows(report: str) -> dict[str, list[dict[str, str]]]:
    """Spec name -> the rows of its table in the markdown report, as column -> cell."""
    tables = {}
    for name, body in re.findall(r"^### (\w+) .*?\n\n(.*?)(?:\n\n|\Z)", report, flags=re.DOTALL | re.MULTILINE):
        lines = [line.strip("|").split(" | ") for line in body.strip().splitlines()]
        header = [cell.strip() for cell in lines[0]]
        tables[name] = [dict(zip(header, (cell.strip() for cell in cells))) for cells in lines[2:]]
    return tables


@pytest.mark.slow
def test_bench_command_writes_report_and_plot(small_run):
    tmp, result = small_run
    assert result.returncode == 0, result.stderr
    assert (tmp / "out" / "report.md").is_file()
    assert (tmp / "out" / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "geometric means over specs at W3" in result.stdout
    assert "plot written to out/plot.png" in result.stdout


def test_report_has_a_row_per_candidate_and_workload(small_run):
    tmp, _ = small_run
    report = (tmp / "out" / "report.md").read_text()
    assert "torch" in report and "memory pass" in report and "4096 elements" in report
    tables = report_rows(report)
    assert set(tables) == {"mish", "gaussian_rbf"}
    expected = {"mish": CANDIDATES | {"native"}, "gaussian_rbf": CANDIDATES}
    for spec, rows in tables.items():
        for workload in ("W1", "W2", "W3", "W4"):
            marked = workload + ("*" if spec == "mish" and workload == "W4" else "")
            got = {row["candidate"].split(" (")[0] for row in rows if row["workload"] == marked}
            assert got == expected[spec], (spec, workload)
    summary = re.search(r"## Geometric means over specs at W3\n\n(.*?)\n\n", report, re.DOTALL).group(1)
    assert {line.split(" | ")[0].strip("| ") for line in summary.splitlines()[2:]} == CANDIDATES | {"native"}


def test_report_op_counts_of_composed_match_a_direct_count(small_run):
    tmp, _ = small_run
    rows = report_rows((tmp / "out" / "report.md").read_text())["mish"]
    ops = {row["workload"]: int(row["kernel ops"]) for row in rows if row["candidate"] == "composed"}
    x, cotangent = torch.rand(16, requires_grad=True), torch.rand(16)
    assert ops["W1"] == sum(MISH_FORWARD.values()) == bench.count_ops(lambda: mish_by_hand(x))
    direct = bench.count_ops(lambda: torch.autograd.grad(mish_by_hand(x), x, cotangent))
    assert ops["W2"] == sum((MISH_FORWARD + MISH_BACKWARD).values()) == direct


def test_report_saved_bytes_of_generated_forward(small_run):
    tmp, _ = small_run
    for spec, rows in report_rows((tmp / "out" / "report.md").read_text()).items():
        auto = next(row for row in rows if row["workload"] == "W2" and row["candidate"].startswith("auto"))
        assert int(auto["nodes"]) >= 2
        keeps = {"mish": "intermediates", "gaussian_rbf": "save_outputs"}[spec]  # tanh(softplus(x)); the output
        kept = next(row for row in rows if row["workload"] == "W2" and row["candidate"] == keeps)
        assert float(kept["saved MiB"]) > 0, spec
        w1 = next(row for row in rows if row["workload"] == "W1" and row["candidate"] == "composed")
        assert w1["saved MiB"] == "-" and float(w1["passes"]) > 0


def test_fuse_generates_fused_candidates_and_says_so(tmp_path):
    subject = bench.make_subject(one_input_spec(), ("save_inputs", "nested"), tmp_path, fuse=True)
    fused = [c for c in subject.candidates if c.label in ("save_inputs", "nested")]
    assert len(fused) == 2 and all(sys.modules[c.fn.__module__].FUSE for c in fused)
    config = bench.make_config(N, "2", "nested", 1, 1, "float32", tmp_path / "r.md", tmp_path / "p.png", fuse=True)
    assert config.command(Path("specs")).endswith(" --fuse")
    assert ("fused", "yes: every level compiled into kernels (build --fuse)") in bench.report._settings(
        bench.Results(config, Path("specs"), 1.0)
    )


def test_a_native_name_that_leads_out_of_torch_is_refused():
    """torch.os is the os module: attribute lookup alone would reach os.system."""
    with pytest.raises(bench.BenchError, match="not a torch function"):
        bench.resolve_native("torch.os.system")
    assert bench.resolve_native("torch.nn.functional.softplus") is F.softplus


# ------------------------------------------------------------------ native: checked before anything is timed
# A native that is not the spec's function elementwise made bench exit 3
# (torch.sum: a cotangent of the wrong shape) or time another function (torch.cos for sin(x)).


def native_spec(native: str, expr: str = "sin(x)", **fields) -> Spec:
    return Spec(path="s.yaml", name="s", expr=expr, inputs=("x",), order=2, native=native,
                lines=(("native", 5),), **fields)


def native_problem(native: str, reference=torch.sin, order: int = 2, dtype=torch.float32, **fields) -> str:
    """The problem check_native raises for ``native`` against ``reference`` (the generated function's place)."""
    from codegen.errors import SpecErrors

    spec = native_spec(native, **fields)
    with pytest.raises(SpecErrors) as raised:
        bench.check_native(spec, bench.resolve_native(native), lambda *xs, **params: reference(*xs), order, dtype)
    (problem,) = raised.value.problems
    return str(problem)


def test_a_native_that_is_not_elementwise_is_refused():
    assert native_problem("torch.sum") == (
        "s.yaml:5: native: torch.sum returns shape () where s returns (64,), for inputs of shape (64,): it is not "
        "elementwise; bench times a native op only where it computes s elementwise: fix native or remove it")


def test_a_native_that_computes_another_function_is_refused_with_a_point():
    problem = native_problem("torch.cos")
    assert problem.startswith("s.yaml:5: native: torch.cos computes other values than s: ") and " at x = " in problem


def test_a_native_that_fails_returns_a_tuple_or_no_floats_is_refused():
    assert "torch.softmax fails on s's inputs (TypeError: " in native_problem("torch.softmax")
    assert "torch.sort returns 2 tensors where s returns one tensor" in native_problem("torch.sort")
    assert "torch.signbit returns bool values where s returns float64" in native_problem("torch.signbit")


def test_a_native_with_other_derivatives_or_none_is_refused_where_they_are_timed():
    """torch.special.bessel_j0 has no derivative in torch: refused where bench times derivatives,
    not at W1 alone. Same values with another derivative (here the reference's: sin(x) in value,
    x in autograd's eyes) are refused too."""
    # with a nonzero derivative, as the generated one (one that is 0 everywhere may be no graph at all)
    differentiable = lambda x: torch.special.bessel_j0(x) + x - x.detach()
    problem = native_problem("torch.special.bessel_j0", reference=differentiable, order=1)
    assert "torch.special.bessel_j0 has no derivative in torch" in problem and "--orders 0" in problem, problem
    bench.check_native(native_spec("torch.special.bessel_j0"), torch.special.bessel_j0, torch.special.bessel_j0, 0)
    problem = native_problem("torch.sin", reference=lambda x: x + (torch.sin(x) - x).detach(), order=1)
    assert "torch.sin computes other derivatives of order 1 than s: " in problem, problem
    bench.check_native(native_spec("torch.square", expr="x**2"), torch.square, lambda x: x**2, order=3)


def test_a_native_failing_in_the_timed_dtype_is_refused():
    problem = native_problem("torch.special.bessel_j0", reference=torch.special.bessel_j0, order=0,
                             dtype=torch.float16)
    assert "fails in float16 (NotImplementedError: " in problem and "another --dtype" in problem, problem


def test_the_bundled_natives_pass_the_check(tmp_path):
    """Params as keywords (softplus's beta), a loss elementwise (huber_loss, reduction="none"), two inputs."""
    from codegen.build import pipeline

    for name in ("softplus", "huber", "exp"):
        spec = pipeline.load_spec(REPO / "specs" / f"{name}.yaml", f"specs/{name}.yaml")
        subject = bench.make_subject(spec, ("save_inputs",), tmp_path, orders=(0, 1, 2, 3))
        assert [c.label for c in subject.candidates][-1] == "native"


def test_bench_refuses_a_wrong_native_before_timing(tmp_path, monkeypatch):
    """Exit 2 with the spec's native line, and nothing timed (it exited 3 inside the timing)."""
    monkeypatch.setattr(bench, "median_times", lambda *args: pytest.fail("timed a wrong native"))
    (tmp_path / "f.yaml").write_text("name: f\nexpr: exp(x)\ninputs: [x]\norder: 1\nnative: torch.sum\n")
    result = CliRunner().invoke(app, ["bench", str(tmp_path), "--size", "64", "--repeats", "1",
                                      "--strategies", "save_inputs"])
    assert result.exit_code == 2, result.output
    # the spec's own check refuses it as it loads (native.probe); bench's check_native: the tests above
    assert "f.yaml:5: native: torch.sum returns a torch.float64 tensor of shape (), not one floating" in result.output
    assert "internal error" not in result.output and "Traceback" not in result.output


def test_profiled_kernel_count_equals_the_dispatch_count_on_eager_code(tmp_path):
    spec = one_input_spec()
    subject = bench.make_subject(spec, ("save_inputs", "nested"), tmp_path)
    inputs = bench.make_inputs(spec, 64, torch.float32)
    for candidate in subject.candidates:
        for order in (1, 2, 3):
            work = bench.workload(candidate.fn, inputs, order)
            assert bench.count_kernels_profiled(work) == bench.count_ops(work), (candidate.label, order)


@pytest.mark.slow  # torch.compile's inductor: 10 s
@pytest.mark.compile
def test_a_fused_level_counts_as_one_kernel(tmp_path):
    """A dispatch mode makes torch.compile run eagerly: bench times first, and counts fused work
    with the profiler, where each compiled graph is one kernel. exp's levels are of one or two ops,
    which run eagerly below SMALL_KERNEL_SIZE elements (emit.functions): the work is that large."""
    from codegen.emit.functions import SMALL_KERNEL_SIZE

    spec = one_input_spec()
    subject = bench.make_subject(spec, ("nested",), tmp_path, fuse=True)
    nested = next(c for c in subject.candidates if c.label == "nested")
    inputs = bench.make_inputs(spec, SMALL_KERNEL_SIZE, torch.float32)
    work = bench.workload(nested.fn, inputs, 2)
    work()
    assert bench.count_kernels_profiled(work) == 3  # level 0, level 1, level 2's forward
    assert bench.count_ops(work) > 3  # under a dispatch mode the levels run op by op (runtime._thin_call)


def test_identical_code_is_measured_once(tmp_path):
    """x**3 shares no call: save_outputs and intermediates generate save_inputs' code, which bench
    measures once (apart, identical code differed by up to 15 % between columns)."""
    spec = Spec(path="c.yaml", name="c", expr="x**3", inputs=("x",), order=2)
    subject = bench.make_subject(spec, ("auto", "save_inputs", "save_outputs", "intermediates", "nested"), tmp_path)
    same = {c.label: c.same_as for c in subject.candidates}
    assert same == {"composed": None, "auto": "save_inputs", "save_inputs": None, "save_outputs": "save_inputs",
                    "intermediates": "save_inputs", "nested": None}
    notes = {c.label: c.note for c in subject.candidates}
    assert notes["save_outputs"] == "= save_inputs" and notes["nested"] == ""
