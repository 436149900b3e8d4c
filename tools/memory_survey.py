"""Which strategies keep the memory bound on random specs: what README's memory section reports.

    python tools/memory_survey.py [--examples 200] [--orders 2,3]

Draws the property tests' random trees (tests/properties/test_properties.py, derandomized), builds each under
every strategy, and measures with ``dbgen bench``'s ``graph_measures`` (256 float32 elements) the
bytes saved for backward at W2 and W3 against autograd through the expression, as printed (the
generated tests' ``composed``) and as written (``memory.written_function``); the bound is the
smaller of the two. Prints how often ``auto`` exceeds it, how often each strategy keeps it, and
the specs that no strategy keeps it for. Run from the repository root (about 1.5 s a spec).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_properties

from codegen.build import memory, pipeline
from codegen.errors import SpecErrors
from codegen.tools import bench

STRATEGIES = ("auto", "save_inputs", "save_outputs", "intermediates", "nested")
SIZE = 256


def measure(spec) -> dict[str, tuple[int, int]]:
    """Strategy (and 'bound') -> (W2, W3) in full-size tensors saved."""
    with tempfile.TemporaryDirectory() as tmp:
        subject = bench.make_subject(spec, STRATEGIES, Path(tmp))
        inputs = bench.make_inputs(spec, SIZE, torch.float32)
        tensor = 4 * SIZE
        found = {}
        for candidate in subject.candidates:
            measures = bench.graph_measures(candidate.fn, inputs)
            found[candidate.label] = (measures["W2"][0] // tensor, measures["W3"][0] // tensor)
        written = bench.graph_measures(memory.written_function(spec), inputs)
        found["bound"] = tuple(min(a, b // tensor) for a, b in
                               zip(found[bench.COMPOSED], (written["W2"][0], written["W3"][0])))
        return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--orders", default="2,3")
    args = parser.parse_args()
    orders = [int(o) for o in args.orders.split(",")]
    rows = []

    @settings(max_examples=args.examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=test_properties.cases(), order=st.sampled_from(orders))
    def survey(case, order):
        case = dataclasses.replace(case, order=min(order, 2) if len(case.inputs) == 3 else order, strategy="auto")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "prop.yaml"
            path.write_text(yaml.safe_dump(case.spec(), sort_keys=False))
            (spec,) = pipeline.load_specs([path])
            try:
                rows.append((case.spec()["expr"], case.order, measure(spec)))
            except SpecErrors:
                pass  # over the symbolic-work limits

    survey()
    keeps = collections.Counter()
    over, none = [], []
    for expr, order, found in rows:
        bound = found["bound"]
        kept = [s for s in STRATEGIES if all(n <= b for n, b in zip(found[s], bound))]
        keeps.update(kept)
        if "auto" not in kept:
            over.append((expr, order, found))
        if not set(kept) - {"auto"}:
            none.append((expr, order, found))
    print(f"{len(rows)} specs; auto over the bound: {len(over)}; no strategy within it: {len(none)}")
    print("within the bound:", ", ".join(f"{s} {keeps[s]}" for s in STRATEGIES))
    for expr, order, found in none:
        print(f"  none: order {order}: {expr}: {found}")


if __name__ == "__main__":
    main()
