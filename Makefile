# Fleetwatch developer commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest venv clean bench

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[server,dev]'
	touch $(STAMP)

## Run the server and a simulated 16-node fleet on the embedded SQLite database.
demo: $(STAMP)
	$(BIN)/fleetwatch demo $(DEMO_ARGS)

## Lint, type-check and run every test (Postgres at FLEETWATCH_TEST_DATABASE_URL or localhost).
test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check app agents tests bench migrations
	$(BIN)/ruff format --check app agents tests bench migrations

typecheck: $(STAMP)
	$(BIN)/mypy app agents

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/ingest_rate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
