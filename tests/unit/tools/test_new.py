"""`dbgen new`: a spec file checked by the loader before it is written, never over another file."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from codegen.build import pipeline
from codegen.cli import app
from codegen.spec import load_spec
from codegen.spec.schema import SCHEMA_FILE, schema_text

SCHEMA_LINE = "# yaml-language-server: $schema="


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_writes_a_spec_that_builds(here):
    result = invoke("new", "swish", "--expr", "x * sigmoid(beta * x)", "--inputs", "x", "--order", "3",
                    "--params", "beta=1.0", "--strategy", "save_outputs", "--doc", 'Swish, "self-gated".')
    assert result.exit_code == 0, result.stderr
    path = here / "specs" / "swish.yaml"
    assert result.stdout.splitlines()[-1] == (
        "dbgen: wrote specs/swish.yaml; next: dbgen show specs/swish.yaml, then dbgen build specs/"
    )
    spec = load_spec(path, "specs/swish.yaml")
    assert (spec.name, spec.expr, spec.inputs, spec.order) == ("swish", "x * sigmoid(beta * x)", ("x",), 3)
    assert spec.params == (("beta", 1.0),) and spec.strategy == "save_outputs"
    assert spec.doc == 'Swish, "self-gated".'
    assert set(pipeline.generate(path)) == {"swish.py", "tests/test_swish.py", "__init__.py", "tests/__init__.py",
                                            "tests/conftest.py", "tests/_dbgen_checks.py"}


def test_first_line_points_at_a_schema_written_beside_it(here):
    assert invoke("new", "cube", "--expr", "x**3", "--inputs", "x").exit_code == 0
    text = (here / "specs" / "cube.yaml").read_text()
    assert text.splitlines()[0] == f"{SCHEMA_LINE}{SCHEMA_FILE}"
    assert (here / "specs" / SCHEMA_FILE).read_text() == schema_text()


def test_a_schema_in_a_folder_above_is_reused(here):
    assert invoke("new", "cube", "--expr", "x**3", "--inputs", "x").exit_code == 0
    schema = here / "specs" / SCHEMA_FILE
    schema.write_text("{}\n")  # a user's own copy: never rewritten
    result = invoke("new", "quad", "--expr", "x**4", "--inputs", "x", "-o", "specs/polynomials")
    assert result.exit_code == 0, result.stderr
    text = (here / "specs" / "polynomials" / "quad.yaml").read_text()
    assert text.splitlines()[0] == f"{SCHEMA_LINE}../{SCHEMA_FILE}"
    assert schema.read_text() == "{}\n"
    assert not (here / "specs" / "polynomials" / SCHEMA_FILE).exists()
    assert "JSON Schema" not in result.stdout
    # one build's SPECS is the whole set: the hint never narrows it to the new spec's subfolder
    assert result.stdout.rstrip().endswith("then dbgen build specs/")


def test_the_build_hint_is_the_bare_command_in_a_configured_project(here):
    (here / "pyproject.toml").write_text('[tool.dbgen]\nspecs = "specs"\n')
    result = invoke("new", "cube", "--expr", "x**3", "--inputs", "x", "-o", "specs/extra")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.rstrip().endswith("then dbgen build")


def test_the_written_spec_validates_against_the_schema(here):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    import yaml

    assert invoke("new", "rbf", "--expr", "exp(-gamma*(x - y)**2)", "--inputs", "x, y",
                  "--params", "gamma=0.5").exit_code == 0
    data = yaml.safe_load((here / "specs" / "rbf.yaml").read_text())
    assert data == {"name": "rbf", "expr": "exp(-gamma*(x - y)**2)", "inputs": ["x", "y"], "order": 2,
                    "params": {"gamma": 0.5}}
    jsonschema.validate(data, json.loads(schema_text()), cls=jsonschema.Draft202012Validator)


def test_output_may_name_the_file(here):
    result = invoke("new", "square", "--expr", "x**2", "--inputs", "x", "-o", "elsewhere/sq.yml")
    assert result.exit_code == 0, result.stderr
    assert load_spec(here / "elsewhere" / "sq.yml", "sq.yml").name == "square"


def test_default_folder_follows_the_project_table(here):
    (here / "pyproject.toml").write_text('[tool.dbgen]\nspecs = "functions"\n')
    assert invoke("new", "square", "--expr", "x**2", "--inputs", "x").exit_code == 0
    assert (here / "functions" / "square.yaml").is_file()


def test_refuses_to_overwrite(here):
    assert invoke("new", "cube", "--expr", "x**3", "--inputs", "x").exit_code == 0
    before = (here / "specs" / "cube.yaml").read_bytes()
    result = invoke("new", "cube", "--expr", "x**5", "--inputs", "x")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "dbgen: specs/cube.yaml already exists; pick another name (or -o path), or delete the file first"
    )
    assert (here / "specs" / "cube.yaml").read_bytes() == before


@pytest.mark.parametrize("args, message", [
    (("bad", "--expr", "x ^ 2", "--inputs", "x"), "dbgen: --expr: '^' is not power in dbgen"),
    (("bad", "--expr", "x * z", "--inputs", "x"), "dbgen: --expr: "),
    (("bad", "--expr", "x", "--inputs", "x", "--order", "9"), "dbgen: --order must be a whole number from 1 to 8"),
    (("bad", "--expr", "x", "--inputs", "x, class"), "dbgen: --inputs 'class' is a Python keyword"),
    (("bad", "--expr", "x", "--inputs", ""), "dbgen: --inputs must list 1 to 8 names, not 0"),
    (("bad", "--expr", "x", "--inputs", "x", "--strategy", "fast"), "dbgen: --strategy 'fast' is not one of"),
    (("Bad", "--expr", "x", "--inputs", "x"), "dbgen: NAME 'Bad' must be lower snake_case"),
    (("list", "--expr", "x", "--inputs", "x"), "dbgen: NAME 'list' would shadow the Python builtin"),
    (("bad", "--expr", "x", "--inputs", "x", "--params", "beta"), "dbgen: --params 'beta' must be NAME=NUMBER"),
    (("bad", "--expr", "x", "--inputs", "x", "--params", "beta=one"), "dbgen: --params 'beta=one' must be NAME=NUMBER"),
    (("bad", "--expr", "x", "--inputs", "x", "--params", "gain=high"),
     "dbgen: --params 'gain=high' must be NAME=NUMBER, e.g. --params gain=1.0"),  # the user's name, not beta
    (("bad", "--expr", "x", "--inputs", "x", "--params", "x=1"), "dbgen: --params 'x' has the name of an input"),
    (("bad", "--expr", "x", "--inputs", "x", "--domain", "x=1"), "dbgen: --domain 'x=1' must be INPUT=LOW,HIGH"),
    (("bad", "--expr", "x", "--inputs", "x", "--domain", "x=0,one"), "dbgen: --domain 'x=0,one' must be"),
    (("bad", "--expr", "x", "--inputs", "x", "--domain", "x=2,1"), "dbgen: --domain of 'x' must have lo < hi"),
    (("bad", "--expr", "x", "--inputs", "x", "--domain", "z=0,1"), "dbgen: --domain names 'z', which is not an input"),
])
def test_refuses_a_bad_spec_and_writes_nothing(here, args, message):
    result = invoke("new", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
    assert not (here / "specs").exists()


def test_refused_spec_says_nothing_was_written(here):
    result = invoke("new", "bad", "--expr", "x ^ 2", "--inputs", "x")
    assert result.stderr.splitlines()[-1] == "dbgen: specs/bad.yaml was not written; fix the option(s) above and rerun"


@pytest.mark.parametrize("name", ["a\nnative: torch.sinh", "a: b", "#a"])
def test_a_name_cannot_inject_yaml(here, name):
    result = invoke("new", name, "--expr", "x", "--inputs", "x", "-o", "specs/a.yaml")
    assert result.exit_code == 2
    assert "NAME" in result.stderr and "lower snake_case" in result.stderr
    assert not (here / "specs" / "a.yaml").exists()


def test_words_yaml_would_read_as_booleans_stay_names(here):
    result = invoke("new", "gate", "--expr", "on * off", "--inputs", "on,off")
    assert result.exit_code == 0, result.stderr
    assert load_spec(here / "specs" / "gate.yaml", "gate.yaml").inputs == ("on", "off")


def test_params_repeated_and_comma_separated(here):
    result = invoke("new", "poly", "--expr", "a*x**2 + b*x + c", "--inputs", "x",
                    "--params", "a=1,b=-2.5", "--params", "c=1e-3")
    assert result.exit_code == 0, result.stderr
    spec = load_spec(here / "specs" / "poly.yaml", "poly.yaml")
    assert spec.params == (("a", 1.0), ("b", -2.5), ("c", 0.001))


def test_unwritable_folder(here):
    (here / "specs").write_text("a file, not a folder\n")
    result = invoke("new", "cube", "--expr", "x**3", "--inputs", "x", "-o", "specs/sub")
    assert result.exit_code == 2
    assert result.stderr.startswith("dbgen: cannot write") and "check the path" in result.stderr


def test_domain_per_input_is_written_and_checked_by_the_build(here):
    """log(x) + sqrt(y) fails the build's domain check at the default [-2, 2]; with --domain, the
    spec new writes builds."""
    result = invoke("new", "lg", "--expr", "log(x) + sqrt(y)", "--inputs", "x,y",
                    "--domain", "x=0.1,2", "--domain", "y=010,20")
    assert result.exit_code == 0, result.stderr
    path = here / "specs" / "lg.yaml"
    spec = load_spec(path, "specs/lg.yaml")
    assert spec.bounds("x") == (0.1, 2.0) and spec.bounds("y") == (10.0, 20.0)
    assert "lg.py" in pipeline.generate(path)


def test_refuses_a_spec_the_build_would_refuse_and_says_which_domain_to_give(here):
    """The build's domain check runs before writing: log(x) is not finite at the default [-2, 2],
    and the message suggests the options that make it so."""
    result = invoke("new", "lg", "--expr", "log(x) * y", "--inputs", "x,y", "--domain", "y=-1,1")
    assert result.exit_code == 2 and not (here / "specs" / "lg.yaml").exists()
    first, last = result.stderr.splitlines()[0], result.stderr.splitlines()[-1]
    assert first.startswith("dbgen: --domain: log(x) is not finite for x in [-2, 0]"), result.stderr
    assert first.endswith("give --domain x=0.1,2 --domain y=-1,1"), result.stderr
    assert last == "dbgen: specs/lg.yaml was not written; fix the option(s) above and rerun"
    again = invoke("new", "lg", "--expr", "log(x) * y", "--inputs", "x,y", "--domain", "x=0.1,2", "--domain", "y=-1,1")
    assert again.exit_code == 0, again.stderr
    assert "lg.py" in pipeline.generate(here / "specs" / "lg.yaml")
