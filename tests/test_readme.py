"""The README's runnable example runs as written, against the checked-in generated/ package."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from codegen import pipeline

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_block_after(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.compile
def test_torch_func_and_compile_example_runs(capsys):
    import torch

    torch._dynamo.reset()
    namespace: dict = {}
    exec(compile(_python_block_after("## Using with torch.func and torch.compile"), str(README), "exec"), namespace)
    hessian, x = namespace["hessian"], namespace["x"]
    assert torch.count_nonzero(hessian - torch.diag(torch.diagonal(hessian))) == 0
    assert namespace["per_sample"].shape == x.shape
    assert namespace["z"].grad is not None
    assert "tensor(" in capsys.readouterr().out


def test_strategy_excerpts_are_what_dbgen_generates():
    """Every code line the README shows under 'The four strategies' stands in a generated example,
    or in mish built with `strategy: nested` (the values passed down the chain)."""
    text = README.read_text()
    section = text[text.index("## The four strategies"):text.index("## The tutorial, with dbgen")]
    generated = "\n".join(p.read_text() for p in (README.parent / "generated").glob("*.py"))
    mish = pipeline.load_spec(README.parent / "specs" / "mish.yaml", "specs/mish.yaml")
    generated += pipeline.generate_one(dataclasses.replace(mish, strategy="nested"))["mish.py"]
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.strip() and line.strip() != "...":
                assert line in generated, f"README shows a line no generated file has: {line!r}"


def test_sinh_bad_example_shows_the_lost_second_derivative(capsys):
    namespace: dict = {}
    exec(compile(_python_block_after("### The counter-example, `SinhBad`"), str(README), "exec"), namespace)
    lines = dict(line.split(" d/dx = ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["SinhBad   "].endswith("d2/dx2 = None")
    assert lines["dbgen sinh"] == lines["exact     "]  # both derivatives, to six decimals


def test_side_by_side_sinh_is_what_dbgen_generates():
    """The right-hand column of the side-by-side listing stands, line for line, in generated/sinh.py."""
    text = README.read_text()
    section = text[text.index("## The tutorial, with dbgen"):text.index("### The counter-example")]
    listing = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    generated = (README.parent / "generated" / "sinh.py").read_text()
    right = [line[53:] for line in listing.splitlines()[1:] if line[53:].strip()]
    continued = {"grad_exp_neg_x):"}  # the wrapped half of a signature the listing splits in two
    for line in right:
        code = line.strip()
        if code not in continued:
            assert code in generated, f"the listing shows a line generated/sinh.py lacks: {code!r}"
