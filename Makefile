# Two commands set everything up on a fresh machine:
#   make build   -> creates .venv (torch 2.13.0 CPU first, then dbgen with its test extras) and runs `dbgen build specs/`
#   make test    -> the same set-up, then the fast tests: all but those marked slow, in parallel
#                   (pytest-xdist), the property tests at a tenth of their budget, one strategy per
#                   case
#   make test-all-> every test, slow ones and full property budgets included
#   make test-rest-> what `make test` left out of test-all (what CI runs after it)
# Both run the dbgen command in the tests' own processes (tests/helpers.py run_dbgen), each command
# once in a fresh process too; DBGEN_TEST_CLI=subprocess runs every call in a fresh process.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
# pytest-xdist workers: auto = one per CPU core. worksteal: each worker starts on its own half of the
# tests, in file order (so a file's module fixtures are mostly made once), and one that runs out
# takes half of what another has left, so both finish together whatever the tests' lengths
JOBS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(JOBS) --dist worksteal --durations=10
# The tests' build cache (tests/build_cache.py): a spec is derived once and read back by every other
# test that builds it, in this run and later ones, until the generator's source changes; so
# `make test-all` reads what `make test` derived. BUILD_CACHE= (empty) keeps it to one run.
BUILD_CACHE ?= .pytest_cache/dbgen-builds
export DBGEN_TEST_BUILD_CACHE ?= $(BUILD_CACHE)

.PHONY: build test test-all test-rest check clean docs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

build: $(VENV)/.installed
	$(BIN)/dbgen build specs/

check: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/dbgen check specs/ --force --jobs 2

test: $(VENV)/.installed
	DBGEN_HYPOTHESIS_PROFILE=$${DBGEN_HYPOTHESIS_PROFILE:-quick} $(PYTEST) -m "not slow"

test-all: $(VENV)/.installed
	$(PYTEST)

# What `make test` leaves out: the slow tests, and the tests whose examples follow the hypothesis
# profile at the full budget (`make test` runs them at a tenth). `make test` then `make test-rest`
# runs what `make test-all` runs (CI does), without the fast tests twice.
test-rest: $(VENV)/.installed
	$(PYTEST) -m "slow or budgeted"

# The documentation site, warnings as errors, into site/ (offline: no fonts or plugins fetched).
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache site
