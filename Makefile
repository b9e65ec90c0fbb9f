# kraftpy: everything a fresh machine needs, installed by these targets.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint fmt docs bench soak jepsen system-deps clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { $(MAKE) --no-print-directory system-python; }
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# System packages the tests use, installed only when missing.
system-deps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi

system-python:
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq python3 python3-venv; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .

test: $(STAMP) system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

docs: $(STAMP)
	$(VENV)/bin/kraftpy config docs > docs/configuration.md

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
