"""`dbgen schema`: the JSON Schema of spec files agrees with dbgen's own loader (codegen/spec/schema.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from codegen.cli import app
from codegen.errors import SpecErrors
from codegen.spec import load_spec
from codegen.spec import model as spec_module
from codegen.spec.schema import DRAFT, schema_text

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra: pip install -e '.[test]'")

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "specs").glob("*.yaml"))
GOOD = {"name": "swish", "expr": "x * sigmoid(beta * x)", "inputs": ["x"], "order": 2}
SPHERICAL = {"name": "to_spherical", "inputs": ["x", "y", "z"], "order": 2,
             "outputs": {"r": "sqrt(x**2 + y**2 + z**2)", "theta": "atan2(sqrt(x**2 + y**2), z)", "phi": "atan2(y, x)"}}


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(schema_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_command_prints_the_schema():
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert result.stdout == schema_text()
    schema = json.loads(result.stdout)
    assert schema["$schema"] == DRAFT == "https://json-schema.org/draft/2020-12/schema"


def test_command_writes_the_schema(tmp_path):
    target = tmp_path / "dbgen-spec.schema.json"
    result = CliRunner().invoke(app, ["schema", "-o", str(target)])
    assert result.exit_code == 0
    assert target.read_text() == schema_text()
    assert "schema written to" in result.stdout


def test_command_reports_an_unwritable_path(tmp_path):
    result = CliRunner().invoke(app, ["schema", "-o", str(tmp_path / "missing" / "schema.json")])
    assert result.exit_code == 2
    assert "cannot write" in result.stderr and "check the path" in result.stderr


def test_schema_covers_every_key_of_the_contract(validator):
    schema = validator.schema
    assert list(schema["properties"]) == list(spec_module.KEYS)
    assert schema["required"] == list(spec_module.REQUIRED_KEYS) == ["name", "inputs", "order"]
    assert schema["oneOf"] == [{"required": ["expr"]}, {"required": ["outputs"]}]
    assert schema["dependentRequired"] == {"stack": ["outputs"]}
    assert schema["properties"]["outputs"]["maxProperties"] == spec_module.MAX_OUTPUTS == 64
    assert schema["additionalProperties"] is False
    assert schema["properties"]["strategy"]["enum"] == list(spec_module.STRATEGIES)
    assert schema["properties"]["order"]["maximum"] == spec_module.MAX_ORDER


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_spec_validates(validator, path):
    errors = [error.message for error in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def test_a_full_spec_validates(validator):
    full = {**GOOD, "params": {"beta": 1.0}, "strategy": "nested", "domain": {"x": [-3, 3.5]},
            "doc": "Swish.", "native": "torch.nn.functional.silu", "fuse": True}
    assert list(validator.iter_errors(full)) == []


@pytest.mark.parametrize("stack", [None, False, True])
def test_an_outputs_spec_validates(validator, tmp_path, stack):
    data = {**SPHERICAL, **({} if stack is None else {"stack": stack})}
    assert list(validator.iter_errors(data)) == []
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(data))
    assert load_spec(path, "spec.yaml").outputs == tuple(SPHERICAL["outputs"].items())


BAD = {
    "unknown key": {**GOOD, "orders": 2},
    "missing expr": {k: v for k, v in GOOD.items() if k != "expr"},
    "order too high": {**GOOD, "order": 9},
    "order zero": {**GOOD, "order": 0},
    "order quoted": {**GOOD, "order": "2"},
    "name not snake case": {**GOOD, "name": "Swish"},
    "name a builtin": {**GOOD, "name": "list"},
    "name a keyword": {**GOOD, "name": "lambda"},
    "name torch": {**GOOD, "name": "torch"},
    "name too long": {**GOOD, "name": "a" * 101},
    "no inputs": {**GOOD, "inputs": []},
    "nine inputs": {**GOOD, "inputs": [f"x{i}" for i in range(9)], "expr": "x0"},
    "input twice": {**GOOD, "inputs": ["x", "x"]},
    "input shadows a function": {**GOOD, "inputs": ["exp"], "expr": "2"},
    "input not an identifier": {**GOOD, "inputs": ["1x"]},
    "param not a number": {**GOOD, "params": {"beta": "one"}},
    "param shadows pi": {**GOOD, "params": {"pi": 3.0}, "expr": "x"},
    "strategy unknown": {**GOOD, "strategy": "fast"},
    "domain of three": {**GOOD, "domain": {"x": [0, 1, 2]}},
    "domain not numbers": {**GOOD, "domain": {"x": ["a", "b"]}},
    "doc two lines": {**GOOD, "doc": "one\ntwo"},
    "native outside torch": {**GOOD, "native": "numpy.sin"},
    "fuse as text": {**GOOD, "fuse": "yes"},
    "expr blank": {**GOOD, "expr": "  "},
    "expr and outputs": {**GOOD, "outputs": {"y": "x"}},
    "neither expr nor outputs": {k: v for k, v in SPHERICAL.items() if k != "outputs"},
    "no outputs": {**SPHERICAL, "outputs": {}},
    "65 outputs": {**SPHERICAL, "outputs": {f"o{i}": "x" for i in range(65)}},
    "outputs a list": {**SPHERICAL, "outputs": ["sqrt(x)"]},
    "output not an identifier": {**SPHERICAL, "outputs": {"1r": "x"}},
    "output shadows a function": {**SPHERICAL, "outputs": {"exp": "x"}},
    "output a keyword": {**SPHERICAL, "outputs": {"lambda": "x"}},
    "output blank": {**SPHERICAL, "outputs": {"r": " "}},
    "output not text": {**SPHERICAL, "outputs": {"r": ["x"]}},
    "stack with expr": {**GOOD, "stack": True},
    "stack as a number": {**SPHERICAL, "stack": 3},
    "stack as text": {**SPHERICAL, "stack": "true"},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_specs_fail_the_schema_and_the_loader(validator, tmp_path, case):
    data = BAD[case]
    assert list(validator.iter_errors(data)), f"the schema accepts: {case}"
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML; the loader must refuse it too
    with pytest.raises(SpecErrors):
        load_spec(path, "spec.yaml")

