# The two commands a newcomer needs: `make run` and `make test`.
# Both create the virtualenv .venv in this repository from pyproject.toml when needed.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SOURCES := exosuit tests bench
# command:package pairs the tests need (installed by `make test` when missing).
SYSTEM_PACKAGES := chromium:chromium zsh:zsh tmux:tmux podman:podman mariadbd:mariadb-server wsrep_sst_rsync:mariadb-server rsync:rsync prometheus:prometheus

.PHONY: run test test-quick check lint bench fuzz system-packages venvs clean protos screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# With the client extra: the README's `.venv/bin/openstack accelerator …` works after it.
$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[client]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.run-installed

# The port is checked first (with the system's Python): when it is taken, `make run` says
# so at once, before building the virtualenv or migrating.
run:
	@$(PYTHON) -m exosuit.port_check $(ARGS)
	@$(MAKE) --no-print-directory $(VENV)/.run-installed
	$(BIN)/exosuit serve $(ARGS)

# The whole suite, as CI runs it: the static checks, side by side with installing what is
# missing of the Debian packages and the OpenStack services' virtualenvs (three jobs at
# once), then every test on TEST_WORKERS pytest-xdist workers (a module's tests on one
# worker: tests/conftest.py), with the coverage floor, then the 25 slowest tests.
# PYTEST_ARGS narrows a run (make test PYTEST_ARGS="-k arqs -x"), in one process: the
# floor is the whole suite's, so a narrowed run measures no coverage.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(max(2, 2 * len(os.sched_getaffinity(0))))')
test:
	@$(MAKE) --no-print-directory -j3 check system-packages venvs
	$(BIN)/pytest $(if $(PYTEST_ARGS),,-n $(TEST_WORKERS) --dist loadgroup --cov --cov-report=term --durations=25) $(PYTEST_ARGS)

# The fast inner loop: the static checks and the tests that start no process.
test-quick: check
	$(BIN)/pytest -m "not slow" -q $(PYTEST_ARGS)

check: $(VENV)/.test-installed
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/lint-imports
	$(BIN)/mypy

# Debian packages some tests drive for real (Chromium, podman, a Galera cluster of
# mariadb-server with its galera-4 and rsync): installed when missing.
system-packages:
	@EXOSUIT_SYSTEM_PACKAGES="$(SYSTEM_PACKAGES)" sh .ci/system-packages

# Virtualenvs of their own for the OpenStack services some tests run next to Exosuit
# (openstack-cyborg and nova pin libraries of their own): .venv-cyborg, .venv-nova.
# Built once (tests/helpers/venvs.py); the fixtures build one that is missing too.
venvs: $(VENV)/.test-installed
	$(BIN)/python -m tests.helpers.venvs

# The console's screenshots, doc/dashboard/*.png (doc/dashboard.md, "Screenshots"): the
# browser walk of every page against a real `exosuit serve` (tests/api/dashboard/test_walk.py)
# saves each page it visits. The old ones go first: a page gone leaves no picture behind.
screenshots: $(VENV)/.test-installed system-packages
	rm -f doc/dashboard/*.png
	EXOSUIT_SCREENSHOTS=doc/dashboard $(BIN)/pytest -q tests/api/dashboard/test_walk.py

lint: $(VENV)/.test-installed
	$(BIN)/ruff check --fix $(SOURCES)
	$(BIN)/ruff format $(SOURCES)

bench: $(VENV)/.test-installed
	$(BIN)/python bench/api.py $(ARGS)

# The long fuzzing campaign against a running API: make fuzz URL=http://127.0.0.1:6666
# (10,000 requests; ARGS="--requests N --seed S"). doc/reliability.md, "Fuzzing".
fuzz: $(VENV)/.test-installed
	$(BIN)/python bench/fuzz.py --url $(URL) $(ARGS)

# The kubelet's gRPC services (exosuit/kubelet/protos/*.proto) as Python modules, committed
# beside them; tests/kubelet/test_protos.py checks that this gives the same files.
PROTOS := exosuit/kubelet/protos
protos: $(VENV)/.test-installed
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
		$(PROTOS)/pluginregistration.proto $(PROTOS)/dra_v1.proto $(PROTOS)/dra_v1beta1.proto

clean:
	rm -rf $(VENV) .venv-cyborg .venv-nova .venv-locks .exosuit .pytest_cache
