# The two commands of the README, and their parts.
#   make demo   the main job: the quick gang-scheduling comparison on the embedded cluster
#   make test   lint, type-check and run the whole test suite, every tier
# Both create .venv and build the control-plane binaries (and the Coscheduling peer; test also
# helm and promtool) when they are missing. The workload operators (`make operators`, about
# 11 minutes cold) are not built by `make test`, which would take a fresh machine's CI past
# its 45 minutes; their e2e modules (test_operators, test_kuberay, test_kueue, test_training)
# run when they are built and skip, naming what is missing, when they are not. `make e2e` builds them.
#
# The test tiers, laid out like the packages:
#   make unit     tests/unit: starts no process and listens only on loopback ports the kernel
#                 chose (tests/unit/conftest.py checks both); on two workers, about 27 s
#                 on this 2-core machine (40 s on one)
#   make process  tests/process: starts processes (serve, the wheel, openssl, lint-imports),
#                 listens on chosen ports or waits in real time (back-offs, leases, loop
#                 stalls); no cluster
#   make e2e      tests/e2e: the real local control plane
#   make fuzz     tests/fuzz at length (make test runs a bounded, seeded campaign of it):
#                 schemathesis over the OpenAPI document, state machines of ledger and gangs

PYTHON ?= python3
# Python's bytecode cache, kept out of the sources: an environment that sets
# PYTHONDONTWRITEBYTECODE (this machine's does) has every process compile every module it
# imports again, which was half of the unit tier's collection (7.9 -> 4.2 s of CPU per
# worker) and a part of each extender, harness and worker start.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/.cache/pycache
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test lint unit process e2e fuzz binaries peers operators tools scheduler-perf venv clean

# The service and, beside it, the harness with the development tools.
$(STAMP): pyproject.toml harness/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . -e './harness[dev]'
	touch $(STAMP)

venv: $(STAMP)

binaries:
	hack/build-binaries.sh

# helm and promtool, for the chart's and the alert rules' tests.
tools:
	hack/build-tools.sh

# The benchmark's Coscheduling peer (kube-scheduler-plugins and its PodGroup CRD).
peers:
	hack/build-peers.sh

# The workload operators whose gangs the extender places (KubeRay, Kueue, Kubeflow's training
# operator) and their CRDs, for the operators' e2e modules and integrations.
operators:
	hack/build-operators.sh

# On demand only (not part of test or demo): `escher-extender bench scheduler-perf` runs it too.
scheduler-perf:
	hack/build-scheduler-perf.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -n 2 tests/unit

process: $(STAMP)
	$(BIN)/pytest tests/process

e2e: $(STAMP) binaries peers operators tools
	$(BIN)/pytest tests/e2e

fuzz: $(STAMP)
	ESCHER_FUZZ_EXAMPLES=$${ESCHER_FUZZ_EXAMPLES:-200} ESCHER_FUZZ_RUNS=$${ESCHER_FUZZ_RUNS:-500} \
	$(BIN)/pytest tests/fuzz

# Two runs at once, then one: the timing-bounded tests (marker `serial`: failover leases,
# bursts) one after another at normal priority, beside every other test on $(WORKERS)
# parallel workers (a file per worker at a time, so module clusters are not duplicated) at
# the lowest CPU priority (nice 19, children included), so the serial tests get the cores
# whenever they want them and the workers use what those leave (the serial run alone keeps
# about one of two cores busy, the workers alone both); then the tests that measure a
# latency ratio or need a core to themselves (marker `alone`), with nothing beside them.
# The serial run's output follows the workers'; every run goes to the end whatever the
# others gave, and the 20 slowest tests of all are printed last.
WORKERS ?= 3
test: $(STAMP) binaries peers tools lint
	rm -rf .test-results
	mkdir -p .test-results
	rc=0; \
	$(BIN)/pytest -m serial --junitxml=.test-results/serial.xml >.test-results/serial.log 2>&1 & serial=$$!; \
	nice -n 19 $(BIN)/pytest -n $(WORKERS) --dist loadfile -m "not serial and not alone" \
		--junitxml=.test-results/parallel.xml || rc=$$?; \
	wait $$serial || rc=$$?; \
	cat .test-results/serial.log; \
	$(BIN)/pytest -m alone --junitxml=.test-results/alone.xml || rc=$$?; \
	$(BIN)/python hack/slowest-tests.py 20 .test-results/*.xml; \
	exit $$rc

demo: $(STAMP) binaries peers
	$(BIN)/escher-extender bench gang --quick --out out/gang-quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
