# kraftpy: every target installs what it needs into .venv (and the system packages it uses).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev
BASE   := $(VENV)/.installed-base
PYTEST := $(VENV)/bin/pytest
APT    := DEBIAN_FRONTEND=noninteractive apt-get
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Every process the targets start (a test cluster's nodes, the CLI commands the tests run, the bench's
# brokers) imports kraftpy's modules; with PYTHONDONTWRITEBYTECODE set in the environment nothing is
# cached, and each start compiles them and attrs' generated methods anew (about twice the import time).
# An empty value is unset for Python: the first process writes __pycache__ and the attrs cache. So the
# installs do not compile every module of every package (pyspark's take half of the install's time):
# the first process to import a module compiles it.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: run test lint fmt docs bench soak jepsen system-deps build-deps system-python clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { $(SUDO) $(APT) update -qq && $(SUDO) $(APT) install -y -qq python3 python3-venv; }
	@command -v $(PYTHON) >/dev/null 2>&1 && $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# What `make run` needs: kraftpy itself.
$(BASE): pyproject.toml setup.py kraftpy/protocol/_record_scan.c | $(PY) build-deps
	$(PY) -m pip install -q --no-compile -e .
	@touch $(BASE)

# What the tests need besides: the clients, pytest, ruff, and pyspark for the Spark connector.
$(STAMP): pyproject.toml setup.py kraftpy/protocol/_record_scan.c | $(PY) build-deps
	$(PY) -m pip install -q --no-compile -e '.[dev,spark]'
	@touch $(STAMP) $(BASE)

# What compiling produce validation's C record scan needs (without it the install still works,
# and the broker checks records in Python, far more slowly): a C compiler and Python's headers.
build-deps:
	@missing=""; \
	command -v cc >/dev/null 2>&1 || missing="$$missing gcc"; \
	py=$$(command -v $(PYTHON) || command -v python3); \
	inc=$$($$py -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null); \
	[ -f "$$inc/Python.h" ] || missing="$$missing $$(basename $$py)-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) $(APT) update -qq && $(SUDO) $(APT) install -y -qq $$missing; \
	fi

# System packages the tests use, installed only when missing.
system-deps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	java_major=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	[ -n "$$java_major" ] && [ "$$java_major" -ge 17 ] || missing="$$missing openjdk-17-jre-headless"; \
	if [ "$$(id -u)" = 0 ]; then \
	  command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	  command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
	fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) $(APT) update -qq && $(SUDO) $(APT) install -y -qq $$missing; \
	fi

run: $(BASE)
	$(VENV)/bin/kraftpy dev --dir data/dev

lint: $(STAMP)
	$(VENV)/bin/ruff check .

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .

# The suite runs in TEST_WORKERS processes, a test file to each (most of its time is spent waiting on
# real clusters of processes, so two workers on two cores halve it); TEST_WORKERS=0 runs it in one.
# Files with tests marked slow are handed out first (tests/conftest.py), so that the workers end together.
TEST_WORKERS ?= 2
test: $(STAMP) system-deps
	$(VENV)/bin/ruff check .
	$(PYTEST) --durations=40 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Regenerate the configuration reference from the schema, and the API table of docs/compatibility.md from
# the versions kraftpy advertises and Kafka's message definitions; run every client and version of the
# client matrix (each in its venv under .venv-compat/) and render its table there too.
docs: $(STAMP) system-deps
	$(VENV)/bin/kraftpy config docs > docs/configuration.md
	$(VENV)/bin/python -m tests.compat.clients
	$(VENV)/bin/python -m tests.compat

# Fault-injection campaigns against a real cluster, one per workload: the queue workload, the
# consumer-group workload (--workload group), then the transaction workload (--workload txn), each
# with JEPSEN_ARGS and its own output directory JEPSEN_OUT/WORKLOAD:
#   make jepsen JEPSEN_ARGS="--time-limit 60 --nemesis all --seed 7" JEPSEN_WORKLOADS=group
# A --workload W in JEPSEN_ARGS runs that workload alone: make jepsen JEPSEN_ARGS="--workload txn --nemesis all"
# A secured cluster (TLS between nodes, SASL_SSL clients, ACLs) with its security faults as well:
#   make jepsen JEPSEN_ARGS="--security sasl_ssl --nemesis all"
JEPSEN_ARGS ?= --time-limit 60 --nemesis all
JEPSEN_WORKLOADS ?= queue group txn
JEPSEN_OUT ?= jepsen-runs/latest
jepsen: $(STAMP) system-deps
	@status=0; workloads="$(JEPSEN_WORKLOADS)"; \
	case " $(JEPSEN_ARGS) " in *" --workload "*) \
	  workloads=$$(echo " $(JEPSEN_ARGS) " | sed -E 's/.* --workload +([a-z]+).*/\1/');; esac; \
	for workload in $$workloads; do \
	  $(PY) -m tests.jepsen.runner $(JEPSEN_ARGS) --workload $$workload --out $(JEPSEN_OUT)/$$workload; \
	  code=$$?; [ $$code -gt $$status ] && status=$$code; \
	done; exit $$status

# Long runs: thousands of Raft simulation seeds (and 10,000 of membership changes) and storage examples, a protocol fuzzing campaign of
# FUZZ_FRAMES frames and one of FUZZ_HANDSHAKES SASL/TLS handshake attempts (reports in fuzz-runs/), then
# campaigns over many seeds.
soak: $(STAMP) system-deps
	KRAFTPY_SIM_SEEDS=$${KRAFTPY_SIM_SEEDS:-5000} KRAFTPY_SIM_MEMBERSHIP_SEEDS=$${KRAFTPY_SIM_MEMBERSHIP_SEEDS:-10000} \
	  KRAFTPY_SOAK=1 $(PYTEST) tests/raft tests/storage -q
	@status=0; \
	$(PY) -m tests.fuzz run --seed $${FUZZ_SEED:-1} --frames $${FUZZ_FRAMES:-105000} --skip-known \
	  --out fuzz-runs/soak-$${FUZZ_SEED:-1}.json || status=1; \
	$(PY) -m tests.fuzz handshakes --seed $${FUZZ_SEED:-1} --attempts $${FUZZ_HANDSHAKES:-100000} \
	  --out fuzz-runs/handshakes-$${FUZZ_SEED:-1}.json || status=1; \
	first=$${JEPSEN_FIRST_SEED:-1}; \
	for seed in $$(seq $$first $$((first + $${JEPSEN_SEEDS:-20} - 1))); do \
	  for nemesis in kill pause partition link membership all; do \
	    $(PY) -m tests.jepsen.runner --time-limit $${JEPSEN_TIME:-120} --nemesis $$nemesis --seed $$seed \
	      --out jepsen-runs/soak/$$nemesis-$$seed || status=1; \
	  done; \
	done; exit $$status

bench: $(STAMP) system-deps
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
