"""A non-editable install from the wheel works: the templates ship inside it, and `dbgen build` run
from another folder writes exactly what the development install writes (the checked-in generated/).

The wheel is built once (pip fetches hatchling into an isolated build environment) and installed
with --no-deps into a fresh venv; the dependencies (sympy, jinja2, pyyaml, typer, torch) come from
the environment running these tests, appended to the venv's sys.path after its own site-packages so
that the installed wheel, not this checkout, is what `import codegen` finds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import codegen
from codegen.build.write import MANIFEST_NAME

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = ("module.py.jinja", "test_module.py.jinja", "init.py.jinja", "conftest.py", "tests_init.py.jinja",
             "dbgen_checks.py")
BIN = "Scripts" if os.name == "nt" else "bin"
EXE = ".exe" if os.name == "nt" else ""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "DBGEN_DEBUG", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(args, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q", "-w", out, REPO], cwd=out)
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    root = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", root], cwd=root.parent)
    python = root / BIN / f"python{EXE}"
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=root.parent)
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).stdout.strip()
    outer = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    # path lines in a .pth file are appended after the venv's own site-packages (and .pth files in
    # those folders are not processed, so an editable install of this checkout stays out of sight)
    Path(site, "_outer_dependencies.pth").write_text("".join(f"{p}\n" for p in outer))
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}  # bytecode where its tests ran in place


def test_wheel_ships_the_package_and_templates(wheel):
    assert wheel.name.startswith(f"dbgen-{codegen.__version__}-"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    for template in TEMPLATES:
        assert f"codegen/templates/{template}" in names, sorted(names)
    for module in sorted((REPO / "codegen").glob("*.py")):
        assert f"codegen/{module.name}" in names, module.name
    assert "dbgen = codegen.cli:run" in scripts, scripts
    assert not [n for n in names if n.startswith(("tests/", "specs/", "generated/", "templates/"))], sorted(names)


@pytest.mark.slow
def test_installed_wheel_builds_from_another_folder(venv, tmp_path):
    python = venv / BIN / f"python{EXE}"
    where = _run(
        [python, "-c", "import codegen, codegen.emit.text as t; print(codegen.__file__); print(t.template_dir())"],
        cwd=tmp_path,
    ).stdout.split()
    assert Path(where[0]).resolve().is_relative_to(venv.resolve()), f"codegen imported from {where[0]}"
    assert Path(where[1]).resolve().is_relative_to(venv.resolve()), f"templates read from {where[1]}"

    version = _run([venv / BIN / f"dbgen{EXE}", "--version"], cwd=tmp_path).stdout.strip()
    assert version == f"dbgen {codegen.__version__}"

    work = tmp_path / "project"
    shutil.copytree(REPO / "specs", work / "specs")
    _run([venv / BIN / f"dbgen{EXE}", "build", "specs", "-o", "installed"], cwd=work)
    installed = _tree(work / "installed")
    # what this checkout builds: the checked-in generated/ (test_determinism keeps it so), less the
    # manifest, whose list of the folders dbgen created depends on the output folder's history
    editable = _tree(REPO / "generated")
    assert sorted(set(installed) - {MANIFEST_NAME}) == sorted(set(editable) - {MANIFEST_NAME})
    assert [rel for rel in editable if rel != MANIFEST_NAME and installed[rel] != editable[rel]] == []
    specs = [p for p in (REPO / "specs").rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
    # a module and a test file per spec, and __init__.py, the manifest, tests/__init__.py, conftest.py, checks
    assert {"__init__.py", ".dbgen-manifest.json"} <= set(installed) and len(installed) == 2 * len(specs) + 5
