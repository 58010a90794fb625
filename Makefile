# rocmlab — every target bootstraps .venv itself (CPU setup path: torch pinned to the CPU build).
VENV      ?= .venv
PY        := $(VENV)/bin/python
ROCMLAB   := $(VENV)/bin/rocmlab
STAMP     := $(VENV)/.rocmlab-installed
# torch is the pin of the matrix's cpu-previous entry in env/matrix.toml, the one place it is
# written: its +cpu build installs without several GB of CUDA libraries, which every newer torch
# on PyPI pulls on x86_64 (CI runs cpu-current through `make freshness`). Read with the standard
# library only: this runs before .venv exists. Override with `make run TORCH=torch==X.Y.Z`.
TORCH     ?= $(shell python3 -c 'import tomllib; m = tomllib.load(open("env/matrix.toml", "rb")); print(next(p for e in m["cpu"] if e["name"] == "cpu-previous" for p in e["pins"] if p.startswith("torch==")))' 2>/dev/null || echo torch)
JOBS      ?= 2
RESULTS   ?= results

# Python caches compiled modules (__pycache__/), pytest its rewritten test modules, as on any
# machine where the environment does not say otherwise: with PYTHONDONTWRITEBYTECODE set, every
# kernel compiled rocmlab again and every pytest worker rewrote every test module (12 s, not 6).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: lint setup site hub-setup system-deps model device-kit build check verify run report freshness test test-slow test-all bench clean help

help:
	@echo "make run        build the labs, run them all in the smoke profile, print the freshness report;"
	@echo "                the course model is built beside the labs that do not need it"
	@echo "make test       fast tests (unit + quick end-to-end)"
	@echo "make test-all   every test, the slow end-to-end ones too (what CI runs)"
	@echo "make freshness  create the CPU environments of env/matrix.toml, run every lab in each, stamp the report"
	@echo "make site       the course website into _site/ (static, bilingual, offline; docs/site.md)"
	@echo "make hub-setup  configurable-http-proxy (npm) for rocmlab hub"
	@echo "make device-kit what ci/device_check.sh needs on a GPU machine without network, into device-kit/ (docs/device-check.md)"
	@echo "make lint       ruff check, ruff format --check, and the import layers of docs/architecture.md (import-linter)"
	@echo "make build | check | verify | report | bench | clean"

# jsonschema compiles rfc3987-syntax's grammar when it is imported: about 2 s of CPU in every
# process that imports nbformat (each rocmlab command, notebook worker and grading slot).
# jupyter-events' extra brings it in, for an IRI format check nothing here uses.
DROP_SLOW_IMPORTS = $(PY) -m pip uninstall --quiet --yes rfc3987-syntax

# torch comes through pip, which reads the machine's pip configuration (where a local +cpu wheel
# may be); the ~180 other packages through uv (from PyPI), which resolves the same versions and
# installs them in parallel: 18 s of CPU where pip took 100 s. pip does it when uv cannot.
# --compile-bytecode, as pip does: a sandboxed kernel, whose user cannot write the venv, would
# otherwise compile every module it imports, in every kernel.
INSTALL = install() { $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) "$$@" \
	|| { echo "uv could not install $$*; installing with pip" >&2; $(PY) -m pip install --quiet "$$@"; }; }; install

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" uv
	$(INSTALL) -e ".[labs,cpu-kernels,hub,dev]"
	$(DROP_SLOW_IMPORTS)
	touch $(STAMP)

setup: $(STAMP)

# The course website: the site extra once, then `rocmlab site` (reads labs/, fetches nothing).
SITE      ?= _site
SITE_STAMP := $(VENV)/.rocmlab-site-installed
$(SITE_STAMP): pyproject.toml | $(STAMP)
	$(INSTALL) -e ".[site]"
	$(DROP_SLOW_IMPORTS)
	touch $(SITE_STAMP)

site: $(SITE_STAMP)
	$(ROCMLAB) site --out $(SITE)

# configurable-http-proxy for `rocmlab hub`, from npm into the venv (no global install).
HUB_PROXY := $(VENV)/hub-node/node_modules/.bin/configurable-http-proxy
$(HUB_PROXY): | $(STAMP)
	@command -v npm >/dev/null || { echo "make hub-setup needs npm (Node.js): e.g. apt-get install nodejs npm" >&2; exit 2; }
	npm install --silent --no-audit --no-fund --prefix $(VENV)/hub-node configurable-http-proxy@5

hub-setup: $(HUB_PROXY)

# Debian packages of the slow tests: redis-server (lab 06's broker), chromium (the hub's
# browser test) and shellcheck (ci/*.sh and the workflows' run: blocks, through actionlint).
# Installed when missing, as root with apt-get; otherwise their tests skip, saying why.
# fonts-noto-cjk: Chinese glyphs in the zh screenshots (site and hub browser tests);
# bubblewrap: the grader's default sandbox and its forked kernels (tests/grading/, tests/sandbox/);
# slapd: the LDAP directory the sign-on test starts (tests/hub/test_hub_ldap.py; its own config,
# the package's system instance is never used).
SYSTEM_PACKAGES := redis-server chromium shellcheck slapd
OTHER_PACKAGES := fonts-noto-cjk bubblewrap
system-deps:
	@missing=""; for pkg in $(SYSTEM_PACKAGES); do command -v $$pkg >/dev/null || missing="$$missing $$pkg"; done; \
	for pkg in $(OTHER_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing (apt-get)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	        || echo "could not install$$missing: the tests that need them will skip"; \
	else echo "not installed:$$missing (needs root and apt-get): the tests that need them will skip"; fi

# The offline course model, built once into the user cache on every core (`make run` builds it
# itself, beside the labs that do not need it).
model: setup
	$(ROCMLAB) assets build-model

# The device check's kit (docs/device-check.md): wheels for the GPU machine's Python 3.12, rocmlab's
# own wheel, the course model and lab 03's adapter (built here first when the cache lacks them);
# fails, naming the biggest items, when it and the working tree exceed the 64 MiB that may travel.
DEVICE_KIT ?= device-kit
device-kit: model
	$(PY) -m rocmlab.lab.qc_adapter
	$(PY) -m rocmlab.execution.device_kit --out $(DEVICE_KIT)

build: setup
	$(ROCMLAB) build

check: setup
	$(ROCMLAB) build --check

verify: model
	$(ROCMLAB) build --verify --jobs $(JOBS)

run: build
	$(ROCMLAB) run --profile smoke --jobs $(JOBS) --out $(RESULTS); status=$$?; \
	$(ROCMLAB) report --results $(RESULTS); exit $$status

report: setup
	$(ROCMLAB) report --results $(RESULTS)

# The release matrix's CPU environments, every lab in each, recorded in ci/history and the README table.
# A lab failing on one environment is a finding for the matrix, so the runs do not stop the target.
FRESHNESS_ENVS ?= cpu-current cpu-previous
freshness: model
	for env in $(FRESHNESS_ENVS); do $(ROCMLAB) env create $$env || exit 2; done
	for env in $(FRESHNESS_ENVS); do $(ROCMLAB) run --env $$env --profile smoke --jobs $(JOBS) --out $(RESULTS); done; true
	$(ROCMLAB) report --results $(RESULTS) --stamp

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# Two pytest workers (pytest-xdist); each module's tests run on one, so its module-scoped
# fixtures (a graded class, a built site) are made once.
TEST_WORKERS ?= 2
XDIST         = -n $(TEST_WORKERS) --dist loadfile
# The slow end-to-end tests run on two workers too, grouped (`--dist loadgroup`; tests/conftest.py
# makes the groups). The tests marked machine_wide all run on one worker, one after another: they
# touch what the whole machine shares. Unix accounts and sweeps of all their processes: a demo hub
# run as root starts every server as `nobody` and, when one stops, ends all of nobody's processes,
# another demo hub's servers too (in a loadfile run one answered 503); the hub tests' accounts and
# the Kubernetes exchange test's uid 1000. Scans of every process and of /tmp (the forgery suite's
# reader). Grading runs may run side by side (each claims grader users of its own); the tests that
# list what runs as their users look only at users no other run holds. A module whose tests share
# a module fixture (a graded class, a built site) stays on one worker; every other test goes to
# whichever worker is free. SLOW_WORKERS=1 runs them one at a time.
SLOW_WORKERS ?= 2
SLOW_XDIST    = $(if $(filter 1,$(SLOW_WORKERS)),,-n $(SLOW_WORKERS) --dist loadgroup)

test: setup
	$(PY) -m pytest -q $(XDIST)

test-slow: model hub-setup system-deps
	$(PY) -m pytest -q -m slow $(SLOW_XDIST) --durations=30

test-all: model hub-setup system-deps
	$(PY) -m pytest -q -m "slow or not slow" $(SLOW_XDIST)

bench: setup
	$(PY) benchmarks/run_overhead.py

clean:
	rm -rf $(RESULTS) .pytest_cache
