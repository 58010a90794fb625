# rocmlab — every target bootstraps .venv itself (CPU setup path: torch pinned to the CPU build).
VENV      ?= .venv
PY        := $(VENV)/bin/python
ROCMLAB   := $(VENV)/bin/rocmlab
STAMP     := $(VENV)/.rocmlab-installed
TORCH     ?= torch==2.13.0
JOBS      ?= 2
RESULTS   ?= results

.PHONY: setup model build check verify run report freshness test test-slow test-all bench clean help

help:
	@echo "make run        build the labs, run them all in the smoke profile, print the freshness report"
	@echo "make test       fast tests (unit + quick end-to-end)"
	@echo "make test-all   every test, the slow end-to-end ones too (what CI runs)"
	@echo "make freshness  create the CPU environments of env/matrix.toml, run every lab in each, stamp the report"
	@echo "make build | check | verify | report | bench | clean"

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[labs,hub,dev]"
	touch $(STAMP)

setup: $(STAMP)

# The offline course model, built once into the user cache (about two minutes on 2 cores).
model: setup
	$(ROCMLAB) assets build-model

build: setup
	$(ROCMLAB) build

check: setup
	$(ROCMLAB) build --check

verify: model
	$(ROCMLAB) build --verify --jobs $(JOBS)

run: build model
	$(ROCMLAB) run --profile smoke --jobs $(JOBS) --out $(RESULTS); status=$$?; \
	$(ROCMLAB) report --results $(RESULTS); exit $$status

report: setup
	$(ROCMLAB) report --results $(RESULTS)

# The release matrix's CPU environments, every lab in each, stamped into ci/results and the README.
# A lab failing on one environment is a finding for the matrix, so the runs do not stop the target.
FRESHNESS_ENVS ?= cpu-current cpu-previous
freshness: model
	for env in $(FRESHNESS_ENVS); do $(ROCMLAB) env create $$env || exit 2; done
	for env in $(FRESHNESS_ENVS); do $(ROCMLAB) run --env $$env --profile smoke --jobs $(JOBS) --out $(RESULTS); done; true
	$(ROCMLAB) report --results $(RESULTS) --stamp

test: setup
	$(PY) -m pytest -q

test-slow: model
	$(PY) -m pytest -q -m slow

test-all: model
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup
	$(PY) benchmarks/run_overhead.py

clean:
	rm -rf $(RESULTS) .pytest_cache
