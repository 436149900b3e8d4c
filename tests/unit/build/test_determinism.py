"""Output is byte-identical for the same specs and dbgen version, whatever PYTHONHASHSEED, working
directory, form of the SPECS argument or order in which the spec files were created; and the
checked-in generated/ is what the checked-in specs/ build to."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import __version__
from codegen.build.write import MANIFEST_NAME

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "specs"


def _spec_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def _place_specs(specs_dir: Path, reverse: bool) -> None:
    """Copy the examples keeping their relative paths, in sorted or reverse order, with mtimes that
    rise in the order of creation (so that any order by time differs between the two layouts)."""
    files = _spec_files()
    if reverse:
        files = files[::-1]
    for index, source in enumerate(files):
        target = specs_dir / source.relative_to(EXAMPLES)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        stamp = 1_600_000_000 + 1000 * index
        os.utime(target, (stamp, stamp))


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}  # bytecode where its tests ran in place


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DBGEN_DEBUG", "PYTHONHASHSEED")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def _without_manifest(tree: dict[str, bytes]) -> dict[str, bytes]:
    """The tree less its manifest, whose list of folders dbgen created depends on the output
    folder's history (generated/ had its tests/ folder before the manifest listed folders)."""
    return {rel: data for rel, data in tree.items() if rel != MANIFEST_NAME}


@pytest.mark.slow
def test_output_is_byte_identical_across_runs(tmp_path):
    """A build unlike the checked-in generated/'s in every way listed below writes its bytes
    (generated/ was built in the repository, with relative arguments, the files created in sorted
    order, under a random hash seed, on another machine and day; its staleness is
    test_checked_in_output_is_up_to_date's to report). One build: each is 20 s of CPU."""
    # elsewhere, deeper, files created in reverse order, absolute arguments, C locale, another
    # hash seed, the environment's variables in reverse order
    cwd = tmp_path / "C" / "deeper" / "work"
    cwd.mkdir(parents=True)
    _place_specs(cwd / "specs", reverse=True)
    env = dict(reversed(_env(PYTHONHASHSEED="999", LC_ALL="C").items()))
    result = subprocess.run([sys.executable, "-m", "codegen", "build", str(cwd / "specs"), "-o", str(cwd / "out")],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    built = _tree(cwd / "out")
    names = sorted(p.stem for p in _spec_files())
    # and tests/__init__.py, conftest.py, _dbgen_checks.py, the manifest
    assert len(built) == 2 * len(names) + 5, sorted(built)
    checked_in = _without_manifest(_tree(REPO / "generated"))
    ours = _without_manifest(built)
    assert sorted(ours) == sorted(checked_in)
    assert [rel for rel in ours if ours[rel] != checked_in[rel]] == [], "differs from the checked-in generated/"


# (working directory in the project, SPECS, OUT, how headers name the specs folder)
SPEC_FORMS = [
    (".", "specs", "out", "specs"),
    (".", "./specs//", "./out/", "specs"),
    (".", "specs/../specs", "out", "specs"),
    ("sub/deeper", "../../specs", "../../out", "../../specs"),
] + ([(".", "specs\\", "out", "specs"), ("sub", "..\\specs", "..\\out", "../specs")] if os.sep == "\\" else [])


PACKAGE_FILES = ("__init__.py", "tests/__init__.py", "tests/conftest.py", "tests/_dbgen_checks.py")  # not from one spec


@pytest.mark.slow
def test_headers_name_specs_with_slashes_however_specs_is_given(tmp_path):
    """The header names the spec relative to the working directory with '/' separators, whatever
    form SPECS takes (backslashes too, where they are separators); below it, every byte is equal."""
    project = tmp_path / "project"
    for name in ("square", "sinh", "cube"):
        target = project / "specs" / "examples" / f"{name}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(EXAMPLES / f"{name}.yaml", target)
    runs = []
    for index, (cwd, specs, out, shown) in enumerate(SPEC_FORMS):
        copy = tmp_path / f"run{index}"
        shutil.copytree(project, copy)
        (copy / cwd).mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen([sys.executable, "-m", "codegen", "build", specs, "-o", out], cwd=copy / cwd,
                                   env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs.append((copy / "out", shown, process))
    bodies = []
    for out, shown, process in runs:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, f"{shown}: {stderr}"
        body = {}
        for rel, data in _tree(out).items():
            if rel == MANIFEST_NAME:  # no header; its hashes are of the bodies compared here
                continue
            first, _, body[rel] = data.partition(b"\n")
            name = Path(rel).stem.removeprefix("test_")
            spec = shown if rel in PACKAGE_FILES else f"{shown}/examples/{name}.yaml"
            assert first.decode() == f"# @generated by dbgen {__version__} from {spec}. DO NOT EDIT.", rel
        bodies.append(body)
    assert len(bodies[0]) == 10 and all(body == bodies[0] for body in bodies)


@pytest.mark.slow
def test_checked_in_output_is_up_to_date():
    """`dbgen check --force specs/` passes in the repository: generated/ is what specs/ build to
    now, each spec regenerated (the headers alone vouch only for the version, and the generator
    changes within one)."""
    result = subprocess.run(
        [sys.executable, "-m", "codegen", "check", "specs/", "--force", "--jobs", "2"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300, check=False)
    assert result.returncode == 0, (
        f"generated/ is stale; run: dbgen build specs/ -o generated --force\n{result.stdout}{result.stderr}"
    )
