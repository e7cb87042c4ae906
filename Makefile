# Two commands do everything: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit install clean bench fast pure system-deps ui-assets cluster-bins cluster-bins-if-go replay replay-volcano image chart

# The dashboard's front-end files are committed (src/caldera/service/ui/static/vendor/), so a
# wheel or an editable install carries them with no Node.js; `make ui-assets` refreshes them
# from the npm registry at the versions ui/package-lock.json pins.
ui-assets:
	./scripts/ui-assets.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77" wheel
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/caldera demo

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: $(STAMP)
	$(BIN)/mypy

system-deps:
	./scripts/system-deps.sh

# The compiled decision core (src/caldera/compiled.py): mypyc builds caldera.core and
# caldera.model in place, once per change of their sources; `make pure` removes it. The suite
# runs the sources (tests/conftest.py) and checks the compiled build against them
# (tests/sim/test_compiled.py).
fast: $(STAMP)
	./scripts/build-core.sh

pure:
	./scripts/build-core.sh --remove

unit: $(STAMP) system-deps cluster-bins-if-go fast
	$(BIN)/pytest

test: lint typecheck unit

bench: $(STAMP) fast
	$(BIN)/caldera bench cycle --nodes 1024 --gpus-per-node 8 --pending 10000 --running 4000

clean: pure
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache ui/node_modules

# The real control plane of tests/k8s_real and `caldera k8s dev-cluster`: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd and KWOK built from Go modules into
# ~/.cache/caldera/cluster-bins (CALDERA_CLUSTER_BINS); then the real Volcano (vc-scheduler,
# vc-controller-manager, vc-webhook-manager and its CRDs) from the Go module proxy into
# ~/.cache/caldera/volcano-bins (CALDERA_VOLCANO_BINS). Cached, so only the first run builds;
# one build after the other (2 cores: two at once only add memory).
cluster-bins:
	./scripts/cluster-bins.sh
	./scripts/volcano-bins.sh
	./scripts/helm-bin.sh

# caldera's OCI image from Debian packages and PyPI wheels (mmdebstrap + umoci, as root):
# build/image/caldera-<version>.oci.tar; the Debian + dependencies layer is cached in
# ~/.cache/caldera/image. docs/kubernetes.md "Install".
image: $(STAMP) system-deps
	PYTHON=$(abspath $(BIN)/python) ./scripts/image.sh

# The chart's parts generated from caldera's own definitions (CRD, admission policy, roles).
chart: $(STAMP)
	$(BIN)/python scripts/chart-files.py

# Outside CI a Volcano that does not build is one line and its tests skip; under CI=true it
# fails the run, as the control plane does.
cluster-bins-if-go:
	@if command -v go >/dev/null 2>&1; then ./scripts/cluster-bins.sh >/dev/null; \
	  ./scripts/helm-bin.sh >/dev/null || { [ "$$CI" != "true" ] || { echo "make: CI needs Helm (scripts/helm-bin.sh failed)" >&2; exit 1; }; }; \
	  if ! ./scripts/volcano-bins.sh >/dev/null; then \
	    if [ "$$CI" = "true" ]; then echo "make: CI needs the real Volcano (scripts/volcano-bins.sh failed)" >&2; exit 1; fi; \
	    echo "make: Volcano did not build: its tests (tests/k8s_real) will skip" >&2; fi; \
	elif [ "$$CI" = "true" ]; then echo "make: CI needs Go to build the real control plane" >&2; exit 1; \
	else echo "make: Go not found: the real-control-plane tests (tests/k8s_real) will skip" >&2; fi

# Issue 14: scenarios replayed on the real control plane beside the simulator's prediction, the
# reports written to docs/replay/ (docs/evaluation.md, "Against the real Volcano"): caldera +
# kube-scheduler (the Volcano modes are `replay-volcano`). About 15 minutes on 2 cores.
replay: $(STAMP) cluster-bins
	$(BIN)/caldera compare ../shared/examples/mixed-small.yaml --runtime k8s --compress 120 \
		--until 21600 --modes caldera --quiet --report docs/replay/mixed-small
	$(BIN)/caldera compare ../shared/examples/seed-starvation.yaml --runtime k8s --compress 60 \
		--until 14400 --modes caldera --quiet --report docs/replay/seed-starvation

# The real Volcano against its simulator baseline and caldera in front of it (issue 14), on the
# Volcano `cluster-bins` builds (or CALDERA_VOLCANO_SCHEDULER / _CONTROLLERS / _CRDS: docs/
# evaluation.md, "Against the real Volcano"). About 60 minutes on a 2-core machine, 36 of them
# the production day (36 h of scenario time at ÷120, each mode).
replay-volcano: $(STAMP) cluster-bins
	$(BIN)/caldera compare docs/replay/scenarios/fragmentation.yaml --runtime k8s --compress 60 \
		--modes volcano --quiet --report docs/replay/v1.14.1/fragmentation
	$(BIN)/caldera compare ../shared/examples/seed-starvation.yaml --runtime k8s --compress 60 \
		--until 14400 --modes volcano,caldera-volcano --quiet --report docs/replay/v1.14.1/seed-starvation
	$(BIN)/caldera compare ../shared/examples/mixed-small.yaml --runtime k8s --compress 120 \
		--until 21600 --modes volcano,caldera-volcano --quiet --report docs/replay/v1.14.1/mixed-small
	$(BIN)/caldera compare src/caldera/examples/demo.yaml --runtime k8s --compress 120 \
		--until 129600 --modes volcano,caldera-volcano --quiet --report docs/replay/v1.14.1/production-day
