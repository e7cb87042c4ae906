# Two commands do everything: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HTMX := src/caldera/service/ui/static/vendor/htmx.min.js

.PHONY: demo test lint typecheck unit install clean bench system-deps ui-assets

# The dashboard's front-end files, from the npm registry (ui/package-lock.json pins them).
$(HTMX): ui/package.json ui/package-lock.json scripts/ui-assets.sh
	./scripts/ui-assets.sh

ui-assets: $(HTMX)

$(STAMP): pyproject.toml $(HTMX)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
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

unit: $(STAMP) system-deps
	$(BIN)/pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/caldera bench cycle --nodes 1024 --gpus-per-node 8 --pending 10000 --running 4000

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache ui/node_modules src/caldera/service/ui/static/vendor
