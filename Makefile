# The two commands a newcomer needs:
#   make demo   a 2-node rehearsal cluster (root, Linux) or this machine alone, running the example job
#   make test   the test suite, tier by tier, stopping at the first tier that fails (installs what it needs)
# The tiers, each a folder of tests/ (tests/conftest.py):
#   make test-unit        no process, no socket, under a minute; needs only the venv with '.[test]'
#   make test-local       node programs as processes, `connection: local` runs, loopback; no root
#   make test-rehearsal   the rehearsal cluster: Docker, sshd, root (as make demo)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
BASE   := $(VENV)/.installed-test
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
# numpy beside torch: without it every rank's `import torch` warns "Failed to initialize NumPy"
NUMPY  ?= numpy>=1.26
# job.launcher: deepspeed's tests run DeepSpeed's per-node launcher on the rehearsal nodes (they use this
# venv). Beside torch, in one pip command, so that its `torch>=2.0` never replaces the pinned torch; an
# sdist that builds no ops (they are compiled at first use, and the launcher uses none).
DEEPSPEED ?= deepspeed==0.19.8
# the watch's tests on a Hugging Face Trainer loop (tests/fixtures/jobs/hf_trainer.py; `make test-heavy`): the
# Trainer and Accelerate, in the same pip command for the same reason
TRAINER ?= transformers==5.24.0 accelerate==1.15.0

.PHONY: demo demo-clean test test-unit test-local test-rehearsal test-heavy deps venv bench diagnose-report clean

# clusterctl and its test dependencies: all the unit tier needs
$(BASE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(BASE)

# what the ranks of the other tiers import
$(STAMP): $(BASE)
	$(PY) -m pip install -q "$(TORCH)" "$(NUMPY)" "$(DEEPSPEED)" $(TRAINER)
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
PYTEST := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q

# the long rehearsals marked `heavy` are left out (make test-heavy): on CI's 2 cores make test takes 25-28 min
# (unit 1, local 5, rehearsal 19-22: over the ~20 aimed at; issue 52).
# Property tests run every example here (hypothesis profile `full`); alone, `make test-unit` runs a quarter
# of them (`quick`, the default: tests/conftest.py) to stay under a minute.
test: deps $(STAMP)
	CLUSTERCTL_HYPOTHESIS=full $(PYTEST) -m "not heavy" tests/unit
	CLUSTERCTL_HYPOTHESIS=full $(PYTEST) -m "not heavy" tests/local
	CLUSTERCTL_HYPOTHESIS=full $(PYTEST) -m "not heavy" --durations=80 tests/rehearsal

test-unit: $(BASE)
	$(PYTEST) tests/unit

test-local: $(STAMP)
	$(PYTEST) -m "not heavy" tests/local

test-rehearsal: deps $(STAMP)
	$(PYTEST) -m "not heavy" --durations=80 tests/rehearsal

test-heavy: deps $(STAMP)
	$(PYTEST) -m heavy

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
