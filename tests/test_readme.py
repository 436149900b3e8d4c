"""The README's runnable example runs as written, against the checked-in generated/ package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
    """Every code line the README shows under 'The four strategies' stands in a generated example."""
    text = README.read_text()
    section = text[text.index("## The four strategies"):text.index("## Commands")]
    generated = "\n".join(p.read_text() for p in (README.parent / "generated").glob("*.py"))
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.strip() and line.strip() != "...":
                assert line in generated, f"README shows a line no generated file has: {line!r}"
