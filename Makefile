# Everyday commands. Each target installs what it needs first (Python venv, Kubernetes binaries).
#   make demo    the documented demo gang on a local real Kubernetes 1.35 control plane
#   make test    lint, type checks, unit tests and end-to-end tests (what CI runs; the binaries
#                build meanwhile)
#   make demo-stop  stop the demo's ome-scheduler, keep the control plane
#   make down    stop the local control plane and ome-scheduler
#   make bench   ome-scheduler, Coscheduling and kube-scheduler on one API server, S1-S6 (hours at full size)
#   make soak    30 minutes of churn with API server and network faults (make soak-ci: 3 minutes, part of test)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv binaries demo demo-stop down lint unit e2e test bench bench-small microbench soak soak-ci clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

binaries:
	e2e/build-binaries.sh

demo: venv binaries
	$(BIN)/python -m e2e.demo

demo-stop: venv
	$(BIN)/python -m e2e.harness stop ome-scheduler

down: venv
	$(BIN)/python -m e2e.harness down

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest tests

e2e: venv binaries
	$(BIN)/pytest e2e

# The binaries build in two phases. From the first moment, the ones the unit checks and most
# end-to-end tests need (CORE_SETS: etcd, Kubernetes, kwok, helm, Toxiproxy, celdiff) build in the
# background while the venv is installed and lint and the unit tests that need no binary run: on a
# cold machine that hides the install, lint and unit time in the build's. Then the rest (the job
# operators, Prometheus, scheduler-plugins, the LWS controller, OME's manager) build at the lowest
# CPU priority while the end-to-end tests that need none of them run: those tests mostly wait on
# the control plane, and the build takes only the CPU they leave. LATE_E2E (the modules that need
# the rest, and e2e/test_rbac.py, which checks that every granted permission is used and so needs
# the LeaderWorkerSet CRD that e2e/test_lws.py installs before it) run once it is done, then the
# small benchmark and the CI soak. On a warm machine both
# builds find everything cached at once. tests/test_chart.py needs the helm binary and
# tests/dra/test_cel_differential.py the Go CEL oracle (celdiff), so they run with the end-to-end
# tests; e2e/test_harness.py (the harness's pure parts) needs no cluster, so it runs with the unit tests.
CORE_SETS := etcd k8s kwok helm toxiproxy celdiff
LATE_E2E := e2e/test_dashboard.py e2e/test_lws.py e2e/test_operators.py e2e/test_rbac.py

test:
	@e2e/build-binaries.sh $(CORE_SETS) >.build-binaries.log 2>&1 & build=$$!; \
	echo "building the core binaries in the background (log: .build-binaries.log)"; \
	$(MAKE) --no-print-directory venv && $(MAKE) --no-print-directory lint && \
	$(BIN)/pytest tests bench e2e/test_harness.py --ignore=tests/test_chart.py --ignore=tests/dra/test_cel_differential.py; \
	checks=$$?; \
	if ! wait $$build; then cat .build-binaries.log; echo "make test: e2e/build-binaries.sh failed (its log above)"; exit 1; fi; \
	grep '==>' .build-binaries.log; exit $$checks
	@nice -n 19 e2e/build-binaries.sh >.build-binaries-late.log 2>&1 & late=$$!; \
	echo "building the other binaries in the background at the lowest priority (log: .build-binaries-late.log)"; \
	OME_K8S_BIN_DIR=$$(tail -n 1 .build-binaries.log) $(BIN)/pytest tests/test_chart.py tests/dra/test_cel_differential.py \
	  e2e --ignore=e2e/test_harness.py $(LATE_E2E:%=--ignore=%) --durations=25; \
	early=$$?; \
	if ! wait $$late; then cat .build-binaries-late.log; echo "make test: e2e/build-binaries.sh failed (its log above)"; exit 1; fi; \
	grep '==>' .build-binaries-late.log; \
	$(BIN)/pytest $(LATE_E2E) --durations=10 && exit $$early
	$(BIN)/python -m bench.run --small --runs 1
	$(BIN)/python -m bench.soak --ci

bench: venv binaries
	$(BIN)/python -m bench.run

bench-small: venv binaries
	$(BIN)/python -m bench.run --small --runs 1

soak: venv binaries
	$(BIN)/python -m bench.soak

soak-ci: venv binaries
	$(BIN)/python -m bench.soak --ci

microbench: venv
	$(BIN)/pytest bench/test_micro.py --benchmark-enable

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist *.egg-info
