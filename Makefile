# The two commands a newcomer needs:
#   make demo   a 2-node rehearsal cluster (root, Linux) or this machine alone, running the example job
#   make test   the test suite (installs what it needs)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
# numpy beside torch: without it every rank's `import torch` warns "Failed to initialize NumPy"
NUMPY  ?= numpy>=1.26
# job.launcher: deepspeed's tests run DeepSpeed's per-node launcher on the rehearsal nodes (they use this
# venv). Beside torch, in one pip command, so that its `torch>=2.0` never replaces the pinned torch; an
# sdist that builds no ops (they are compiled at first use, and the launcher uses none).
DEEPSPEED ?= deepspeed==0.19.8

.PHONY: demo demo-clean test test-heavy test-fast deps venv bench diagnose-report clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" "$(NUMPY)" "$(DEEPSPEED)"
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages for the rehearsal cluster (as root; a no-op when present or not root).
deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; \
	  for p in sshd:openssh-server ssh:openssh-client dockerd:docker.io docker-registry:docker-registry \
	           ip:iproute2 iptables:iptables ibstat:infiniband-diags ps:procps sudo:sudo \
           slurmctld:slurm-wlm munged:munge chromium:chromium chromedriver:chromium-driver orted:openmpi-bin; do \
	    command -v $${p%%:*} >/dev/null || missing="$$missing $${p#*:}"; done; \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi

demo: deps $(STAMP)
	PYTHON=$(PY) bash examples/demo.sh

demo-clean: $(STAMP)
	PYTHON=$(PY) bash examples/demo.sh clean

# PATH: jobs on `connection: local` hosts run `python3` from PATH, as in an activated venv.
test: deps $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -m "not heavy" --durations=25

# the long rehearsals left out of `make test` (pytest's `heavy` marker): CI's 2 cores keep make test near 20 min
test-heavy: deps $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -m heavy

test-fast: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -m "not sandbox and not slow"

bench: deps $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py $(BENCH_ARGS)

# docs/diagnosis.md (accuracy on the corpus' splits, confusions, the 1 GB benchmark) and the README's
# diagnosis table, both from clusterctl/diagnose/rules.py
diagnose-report: $(STAMP)
	$(PY) bench/diagnose_report.py $(DIAGNOSE_REPORT_ARGS)
	$(PY) -m clusterctl.diagnose.table

# docs/schemas/ (the --json documents' types) and docs/architecture.md (the package docstrings)
docs: $(STAMP)
	$(PY) -m clusterctl.documents
	$(PY) -m clusterctl.documents.architecture

clean: demo-clean
	rm -rf $(VENV) .clusterctl logs
