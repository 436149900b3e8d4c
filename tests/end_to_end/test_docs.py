"""The documentation site (docs/, mkdocs.yml): its examples run, its excerpts are what dbgen writes,
and its reference pages are rendered from dbgen itself."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import subprocess
import sys

import pytest
from docs_examples import (
    ROOT,
    Example,
    all_examples,
    prepare_project,
    run_python,
    runnable_python,
)

from codegen.build import pipeline

DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _losses(output: str) -> list[float]:
    return [float(value) for value in re.findall(r"loss (\S+)", output)]


def _check_training(output: str) -> None:
    losses = _losses(output)
    assert len(losses) == 4 and losses[-1] < losses[0] / 100, output


def _check_sinh_bad(output: str) -> None:
    lines = dict(line.split(" d/dx = ", 1) for line in output.splitlines())
    assert lines["SinhBad   "].endswith("d2/dx2 = None")  # the tutorial's bug: no second derivative
    assert lines["dbgen sinh"] == lines["exact     "]  # both derivatives, to six decimals


# What each example's output must show, beyond running without an error.
OUTPUT_CHECKS = {
    "README.md": _check_training,
    "docs/getting-started.md": _check_training,
    "docs/guide/tutorial.md": _check_sinh_bad,
}


def _params(examples: list[Example]):
    """Each example a test; in ``make test`` only the README's (what a newcomer runs first), the
    others in ``make test-all`` (each makes a project and runs Python in it: 4-8 s)."""
    return [pytest.param(e, id=e.id, marks=[*([pytest.mark.compile] if e.argument == "compile" else []),
                                            *([] if e.id.startswith("README.md") else [pytest.mark.slow])])
            for e in examples]


def test_the_pages_hold_the_examples_the_tests_run():
    """A marker lost in an edit would silently drop an example from the tests."""
    pages = {e.id.split(":")[0] for e in runnable_python()}
    assert {"README.md", "docs/getting-started.md", "docs/guide/tutorial.md", "docs/guide/torch-func.md"} <= pages
    assert any(e.action == "expect" for e in all_examples())


@pytest.fixture(scope="module")
def built_projects() -> dict:
    """Projects made once per set of steps (the README and getting started share theirs)."""
    return {}


@pytest.mark.parametrize("example", _params(runnable_python()))
def test_example_runs_in_a_fresh_project(example: Example, built_projects, tmp_path_factory):
    project = tmp_path_factory.mktemp("project")
    prepare_project(example, project / "example", built_projects)
    output = run_python(example, project / "example")
    check = OUTPUT_CHECKS.get(example.id.split(":")[0])
    if check is not None:
        check(output)


def test_strategy_excerpts_are_what_dbgen_generates():
    """Every code line the strategies page shows stands in a generated example, or in mish built
    with `strategy: nested` (the values passed down the chain)."""
    text = (DOCS / "guide" / "strategies.md").read_text()
    generated = "\n".join(p.read_text() for p in (ROOT / "generated").glob("*.py"))
    mish = pipeline.load_spec(ROOT / "specs" / "mish.yaml", "specs/mish.yaml")
    generated += pipeline.generate_one(dataclasses.replace(mish, strategy="nested"))["mish.py"]
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 5
    for block in blocks:
        for line in block.splitlines():
            if line.strip() and line.strip() != "...":
                assert line in generated, f"docs/guide/strategies.md shows a line no generated file has: {line!r}"


def test_side_by_side_sinh_is_what_dbgen_generates():
    """The right-hand column of the tutorial page's listing stands, line for line, in generated/sinh.py."""
    text = (DOCS / "guide" / "tutorial.md").read_text()
    listing = re.search(r"```text\n# the tutorial, by hand.*?```", text, re.DOTALL).group(0)
    generated = (ROOT / "generated" / "sinh.py").read_text()
    right = [line[53:] for line in listing.splitlines()[2:-1] if line[53:].strip()]
    assert len(right) > 20
    continued = {"grad_exp_neg_x):"}  # the wrapped half of a signature the listing splits in two
    for line in right:
        code = line.strip()
        if code not in continued:
            assert code in generated, f"the listing shows a line generated/sinh.py lacks: {code!r}"


def test_cli_reference_has_every_command_as_its_help_shows_it():
    hooks = _hooks()
    names = hooks.command_names()
    assert {"build", "check", "show", "graph", "new", "schema", "bench"} <= set(names)
    page = hooks.cli_reference()
    for name in names:
        assert f"## dbgen {name}\n" in page
        assert hooks.command_help([name]) in page
    assert "Usage: dbgen build" in page


def test_schema_reference_is_dbgen_schema():
    from codegen.spec.schema import schema_text

    page = _hooks().schema_reference()
    shown = re.search(r"```json\n(.*)```", page, re.DOTALL).group(1)
    assert json.loads(shown) == json.loads(schema_text())


def test_error_catalogue_shows_one_path_line_problem_per_kind():
    hooks = _hooks()
    for title, _remedy, spec_text in hooks.BAD_SPECS:
        code, stderr = hooks.build_errors(spec_text)
        assert code == 2, (title, stderr)
        first = stderr.splitlines()[0]
        assert re.match(r"specs/f\.yaml:\d+: \S", first), (title, stderr)
        assert "Traceback" not in stderr


def test_every_page_is_in_the_nav_and_markers_are_known():
    config = (ROOT / "mkdocs.yml").read_text()
    markers = set(_hooks().RENDERERS)
    for page in DOCS.rglob("*.md"):
        relative = page.relative_to(DOCS).as_posix()
        assert f": {relative}\n" in config, f"{relative} is not in mkdocs.yml's nav"
        for marker in re.findall(r"<!-- dbgen:\w+ -->", page.read_text()):
            assert marker in markers, f"{relative}: unknown marker {marker}"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="mkdocs and mkdocs-material are not installed (pip install -e '.[docs]'; make docs)")
def test_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "Usage: dbgen build" in (tmp_path / "site" / "reference" / "cli.html").read_text()


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_install_step_installs_what_the_next_steps_run(page):
    """A newcomer runs the page's commands in order: its pip lines must install dbgen from a path
    or URL (PyPI's dbgen is another package) and every other command its run blocks call."""
    text = (ROOT / page).read_text(encoding="utf-8")
    installs = " ".join(line for line in re.findall(r"^pip install .*$", text, flags=re.MULTILINE))
    assert "/path/to/dbgen" in installs and not re.search(r"pip install ['\"]?dbgen\b", text), installs
    commands = {line.split()[0] for block in re.findall(r"<!-- docs-test: run -->\n```sh\n(.*?)```", text, re.DOTALL)
                for line in block.splitlines() if line.strip()}
    assert commands - {"dbgen"} <= set(installs.split()), (commands, installs)


def test_no_page_installs_an_extra_from_pypi():
    """``pip install 'dbgen[scipy]'`` installs PyPI's unrelated dbgen in a fresh environment."""
    for page in [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "templates").glob("*.jinja")]:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"pip install ['\"]?dbgen\[", text), page
