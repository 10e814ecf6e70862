# The two commands a newcomer needs: `make run` and `make test`.
# Both create the virtualenv .venv in this repository from pyproject.toml when needed.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.run-installed

run: $(VENV)/.run-installed
	$(BIN)/exosuit serve $(ARGS)

test: $(VENV)/.test-installed
	$(BIN)/ruff check exosuit tests bench
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(VENV)/.test-installed
	$(BIN)/ruff check --fix exosuit tests bench
	$(BIN)/ruff format --check exosuit tests bench || true

bench: $(VENV)/.test-installed
	$(BIN)/python bench/api.py $(ARGS)

clean:
	rm -rf $(VENV) .exosuit .pytest_cache
