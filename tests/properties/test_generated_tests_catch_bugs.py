"""The generated tests must fail when a derivative formula in the generated module is wrong.

Each case builds an example, corrupts one formula at one derivative level, and runs the generated
test file: the right tests must fail (and the unmutated module's tests must pass).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.build import pipeline, write

ROOT = Path(__file__).resolve().parents[2]

MUTATIONS = {
    # first derivative of a save_inputs Function, off by 0.05%: below gradcheck's tolerance, not ours
    "square": (r"grad_x = grad_out \* x \* 2", "grad_x = grad_out * x * 2.001",
               ["test_derivatives_match_composed[1]", "test_derivatives_match_composed[2]"]),
    # the third derivative, at the last nested level only: gradcheck and gradgradcheck cannot see it
    "cube": (r"grad_x = scaled_grad2_x \* \(prod_grad3_grad_out_x \+ prod_grad3_x_grad_out\)",
             "grad_x = scaled_grad2_x * (prod_grad3_grad_out_x + 1.001 * prod_grad3_x_grad_out)",
             ["test_derivatives_match_composed[3]"]),
    # the tutorial's warning: forget the gradient arriving on an intermediate output (its part that
    # is not a constant: the constant parts are summed apart)
    "sinh": (r"\n        if grad_expm1_x is not None:\n            grad_x = _accumulate\(grad_x, expm1_x \* grad_expm1_x\)", "",
             ["test_gradgradcheck", "test_derivatives_match_composed[2]"]),
    # a wrong power of a param: invisible at the default beta = 1.0, seen at the other values
    "softplus": (r"sigmoid_prod_beta_x = torch\.sigmoid\(beta \* x\)",
                 "sigmoid_prod_beta_x = torch.sigmoid(beta**2 * x)",
                 ["test_gradcheck[other_params]", "test_derivatives_match_composed[other_params-1]"]),
    # one param for another: invisible while both are 1.0, and while both other values are equal
    "lennard_jones": (r"\(24 \* epsilon \* sigma_pow6\)", "(24 * sigma * sigma_pow6)",
                      ["test_derivatives_match_composed[other_params-1]"]),
}


def _build(tmp_path: Path, name: str) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(ROOT / "specs" / f"{name}.yaml", specs)
    out = tmp_path / "out"
    write.write_files(out, pipeline.generate(specs, root=tmp_path))
    return out


def _run_generated_tests(out: Path, name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", str(out / "tests" / f"test_{name}.py")],
        capture_output=True, text=True, cwd=out.parent, timeout=300, check=False)


# each case runs the generated tests twice in a fresh pytest (about 10 s): in `make test-all` only
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) for n in sorted(MUTATIONS)])
def test_generated_tests_fail_on_a_corrupted_formula(tmp_path, name):
    pattern, replacement, must_fail = MUTATIONS[name]
    out = _build(tmp_path, name)
    clean = _run_generated_tests(out, name)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    module = out / f"{name}.py"
    source = module.read_text()
    mutated, count = re.subn(pattern, replacement, source, count=1)
    assert count == 1, f"the mutation pattern no longer matches {name}.py; update it"
    module.write_text(mutated)

    result = _run_generated_tests(out, name)
    assert result.returncode == 1, result.stdout
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    for test in must_fail:
        assert any(f"::{test} " in line or line.endswith(f"::{test}") for line in failed), result.stdout
