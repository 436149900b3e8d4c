"""The README: short, with the two commands, an example that runs (tests/end_to_end/test_docs.py runs it in a
fresh project), and links that lead somewhere. Its former long content is in docs/ and is checked
by tests/end_to_end/test_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_sets_up_with_two_commands():
    text = README.read_text()
    block = re.search(r"## Working on dbgen\n.*?```sh\n(.*?)```", text, re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ["make build", "make test"]


def test_readme_is_short_and_has_a_runnable_example():
    text = README.read_text()
    assert len(text.splitlines()) <= 120
    assert "<!-- docs-test: run -->\n```python" in text
    assert "<!-- docs-test: run -->\n```sh" in text


def test_readme_links_lead_to_files_and_anchors():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#([^)]+))?\)", text)
    local = [(path, anchor) for path, anchor in links if "://" not in path]
    assert len(local) >= 15
    for path, anchor in local:
        target = README.parent / path
        assert target.exists(), f"README links to a missing {path}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README links to a missing heading {path}#{anchor}"
