# One entry point for people and CI.  Every target sets up what it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jupyter-pause-installed
JLPM := cd labextension && ../$(BIN)/jlpm
JUPYTER_ARGS ?=
# the venv first on PATH: jlpm and jupyter-builder live there; then the hub's proxy
HUB_PROXY := $(VENV)/hub-proxy/node_modules/.bin/configurable-http-proxy
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/$(VENV)/hub-proxy/node_modules/.bin:$(PATH)
PYTEST_ARGS ?=
# test files run in parallel, each whole on one worker (its servers, hubs and browser
# are module-scoped); mostly waiting on kernels and servers, so more workers than cores
PYTEST_WORKERS ?= 3

.PHONY: lab test lint format bench bench-rest bench-objects bench-objectstore bench-spot gpu-check build dist check-wheel browser kubectl strace prometheus hub-proxy clean

# --- set-up -------------------------------------------------------------
$(STAMP): pyproject.toml labextension/package.json
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU build of torch on this machine; an unpinned torch pulls CUDA (GBs)
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet hatchling editables hatch-nodejs-version hatch-jupyter-builder "jupyter-builder>=1.2,<2"
	$(MAKE) build
	$(BIN)/pip install --quiet --no-build-isolation -e ".[torch,kubernetes,test,dev]"
	$(BIN)/jupyter labextension develop --overwrite . >/dev/null
	touch $(STAMP)

# the labextension: TypeScript -> jupyter_pause/labextension (prebuilt)
build: $(VENV)/bin/jlpm
	$(JLPM) install
	$(JLPM) build

$(VENV)/bin/jlpm:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "jupyter-builder>=1.2,<2"

# --- the two README commands --------------------------------------------
# containers and CI machines often run as root, which jupyter refuses by default
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(ROOT_ARGS) $(JUPYTER_ARGS)

test: $(STAMP) browser kubectl strace prometheus hub-proxy lint check-wheel
	# the frontend's unit tests (jest, labextension/src/__tests__)
	$(JLPM) test
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# --- the rest ------------------------------------------------------------
lint: $(STAMP)
	$(BIN)/ruff check jupyter_pause tests benchmarks
	$(BIN)/ruff format --check jupyter_pause tests benchmarks
	$(JLPM) lint:check

format: $(STAMP)
	$(BIN)/ruff check --fix jupyter_pause tests benchmarks
	$(BIN)/ruff format jupyter_pause tests benchmarks
	$(JLPM) lint

# Kishu, the incremental peer, for the re-checkpoint comparison: its own environment
# (it brings Flask, pandas and more), with the same torch
PEERS := $(VENV)/peers/bin/python
$(PEERS):
	$(PYTHON) -m venv $(VENV)/peers
	$(VENV)/peers/bin/pip install --quiet "torch==2.13.0" "kishu==0.3.4"

bench: $(STAMP) $(PEERS)
	$(BIN)/python benchmarks/bench_checkpoint.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/bench_objects.py $(OBJECTS_BENCH_ARGS)
	$(BIN)/python benchmarks/bench_rest.py $(REST_BENCH_ARGS)
	$(BIN)/python benchmarks/bench_server_latency.py
	$(BIN)/python benchmarks/bench_autosave.py $(AUTOSAVE_BENCH_ARGS)
	$(BIN)/python benchmarks/bench_objectstore.py $(OBJSTORE_BENCH_ARGS)
	$(BIN)/python benchmarks/drill_spot.py $(SPOT_BENCH_ARGS)

# the spot drill alone: SIGTERM at random moments over a throttled link, another node
# resumes, the work lost against grace x bandwidth (issue #38)
bench-spot: $(STAMP)
	$(BIN)/python benchmarks/drill_spot.py $(SPOT_BENCH_ARGS)

# what a click or a magic adds around the engine, through REST, with the timeline (issue #41)
bench-rest: $(STAMP)
	$(BIN)/python benchmarks/bench_rest.py $(REST_BENCH_ARGS)

# object-heavy namespaces against cloudpickle (issue #36)
bench-objects: $(STAMP)
	$(BIN)/python benchmarks/bench_objects.py $(OBJECTS_BENCH_ARGS)

# the bucket rows alone (a SeaweedFS it starts on 127.0.0.1)
bench-objectstore: $(STAMP)
	$(BIN)/python benchmarks/bench_objectstore.py $(OBJSTORE_BENCH_ARGS)

# The device check (issue #40): the wheels the device machine lacks (for its Python 3.12),
# dist/'s own among them, into .gpu-wheels/ (ignored), checked to fit what a device call
# carries; prints the one call to make. CI runs its dry run (tests/test_gpu_check.py).
gpu-check: dist
	bash benchmarks/gpu_check.sh --prepare

# The sdist and the wheel in dist/, with the labextension prebuilt inside (by `build`,
# through the set-up): installing them needs no node.  The build hook skips jlpm
# when jupyter_pause/labextension is there.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m hatchling build -d dist

# Install dist/'s wheel into a fresh virtualenv with no node on PATH, with the README's
# and docs' install lines: both extension lists must show jupyter-pause enabled and OK,
# and a kernel started as the server starts kernels must have the magics.
check-wheel: dist
	bash .ci/check-wheel

# Debian's chromium for the browser tests (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "Install Debian's chromium (sudo apt-get install chromium) for the browser tests" >&2; exit 1; fi; }

# kubectl renders the deploy/ kustomize bases in the tests: any kubectl on PATH that
# runs, else Debian's kubernetes-client (never over another package's /usr/bin/kubectl).
kubectl:
	@bash .ci/ensure-kubectl

# strace records the syscalls of a real server and kernel in the durability test.
strace:
	@command -v strace >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; \
	  else echo "Install strace (sudo apt-get install strace) for the durability test" >&2; exit 1; fi; }

# Prometheus scrapes a real server in the metrics test (tests/accounting/test_metrics_prometheus.py).
prometheus:
	@command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  else echo "Install Debian's prometheus (sudo apt-get install prometheus) for the metrics test" >&2; exit 1; fi; }

# JupyterHub's proxy for the hub tests (tests/hub): npm, not pip
hub-proxy: $(HUB_PROXY)

$(HUB_PROXY):
	npm install --prefix $(VENV)/hub-proxy configurable-http-proxy@5 --silent --no-audit --no-fund

clean:
	rm -rf $(VENV) labextension/node_modules labextension/lib jupyter_pause/labextension dist build
