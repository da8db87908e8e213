# hetlab: two commands, each sets itself up on a fresh machine.
#   make lab    start the course (JupyterLab on the checkout, opened at notebooks/00)
#   make test   run every test: unit tests + every notebook through nbval (quick mode)
#   make check  the fast tier: the tests that need no Ray, no notebook and no rehearsal (about a minute)
#   make hooks  once per clone, for contributors: a commit's notebooks go without outputs (nbstripout)
#   make test-full   every notebook in full mode (HETLAB_QUICK=0): full training runs, slow
#   make gpu-check   on a machine with an NVIDIA GPU: the course's CUDA claims, a table + JSON
#   make gpu-dry-run the GPU machine's prepared call, every step, on this CPU (stand-in mode)
# One environment per machine. In an activated conda environment that already holds the course's
# Python 3.11, torch and Ray (the one `conda env create -f environment-*.yml` makes: CONDA_PREFIX),
# hetlab goes into that environment and make uses its python and jupyter: no .venv, no second
# torch and Ray. Anywhere else (no conda, or a conda environment without them) make builds .venv
# as below. `make lab CONDA_ENV=` forces .venv.
ifndef CONDA_ENV
CONDA_ENV := $(shell p="$$CONDA_PREFIX/bin/python"; [ -n "$$CONDA_PREFIX" ] && [ -x "$$p" ] && "$$p" -c 'import sys, importlib.util as u; sys.exit(sys.version_info[:2] != (3, 11) or not all(u.find_spec(m) for m in ("ray", "torch")))' 2>/dev/null && echo "$$CONDA_PREFIX")
endif
# The Python .venv is built from: the first Python 3.11 of an activated conda environment
# (environment-*.yml pin 3.11.7 on both machines: Ray joins nodes whose Python matches to the
# patch), python3.11, python3.
PYTHON ?= $(shell for p in "$$CONDA_PREFIX/bin/python" python3.11 python3; do command -v "$$p" >/dev/null 2>&1 && "$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null && { command -v "$$p"; exit 0; }; done; command -v python3)
VENV   ?= .venv
ifeq ($(strip $(CONDA_ENV)),)
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hetlab-installed
else
BIN    := $(CONDA_ENV)/bin
STAMP  := $(CONDA_ENV)/.hetlab-installed
endif

.PHONY: lab test check hooks test-full bench gpu-check gpu-dry-run clean-venv

$(VENV)/.hetlab-installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "hetlab needs Python 3.11 (Ray refuses nodes with another Python): set PYTHON=/path/to/python3.11")'
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# In the course's conda environment: hetlab itself (editable); torch and Ray are already there, so
# pip installs only what is missing.
ifneq ($(strip $(CONDA_ENV)),)
$(CONDA_ENV)/.hetlab-installed: pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@
endif

# The project's own JupyterLab defaults (jupyter/settings/overrides.json): no "get notified
# about Jupyter news?" pop-up; Markdown pages open rendered; the file browser follows the open
# document. Your own JupyterLab settings still apply on top.
LAB_SETTINGS := $(CURDIR)/jupyter/settings

# JupyterLab serves the whole checkout, opened at notebooks/00: a notebook's links to docs/ (answers,
# reference figures, troubleshooting) and to the README open in the lab, which opens nothing above
# the folder it serves (tests/test_lab_links.py asks its server for every link).

lab: $(STAMP)
	@$(BIN)/python -c 'from hetlab.tools.doctor import OK, python_check; c = python_check(); c.status == OK or print(f"note: this environment: {c.name}: {c.detail}. For the real pair: {c.fix}; or use the conda environment of environment-*.yml: conda activate hetlab, then make lab")'
	$(abspath $(BIN))/jupyter lab --ServerApp.root_dir='$(CURDIR)' --LabApp.app_settings_dir='$(LAB_SETTINGS)' notebooks/00_setup_check.ipynb

# Two processes at once (pytest-xdist): make test's two lanes (conftest.py, SECOND_LANE), make check's
# tests handed out one by one. LANES= runs one process.
LANES ?= -n 2
test: $(STAMP)
	HETLAB_QUICK=1 $(BIN)/python -m pytest -q $(LANES) $(PYTEST_ARGS)

# The inner loop's tier (conftest.py, --fast-tier): tests/ less every test marked `ray` or using a
# fixture that starts Ray; no notebook, no rehearsal. A test in it that starts Ray fails.
check: $(STAMP)
	HETLAB_QUICK=1 $(BIN)/python -m pytest -q tests --fast-tier $(LANES) $(PYTEST_ARGS)

# For contributors, once per clone: git's pre-commit hook (scripts/pre-commit) stops a commit whose
# notebooks carry outputs and strips them with nbstripout (cell ids kept); tests/test_workflow.py
# checks that every committed notebook has none.
hooks: $(STAMP)
	sed 's|@PYTHON@|$(abspath $(BIN))/python|' scripts/pre-commit > "$$(git rev-parse --git-path hooks)/pre-commit"
	chmod +x "$$(git rev-parse --git-path hooks)/pre-commit"

# Full mode: the notebooks' real training runs (minutes per notebook on a 2-core CPU). The kernel
# is this venv's Python (--nbval-current-env); a long training cell may run CELL_TIMEOUT seconds;
# --nbval-output-timeout (conftest.py) replaces nbval's fixed 5 s wait for a finished cell's output.
NOTEBOOKS    ?= notebooks
CELL_TIMEOUT ?= 1800
test-full: $(STAMP)
	HETLAB_QUICK=0 $(BIN)/python -m pytest -q $(NOTEBOOKS) --nbval-current-env \
		--nbval-cell-timeout=$(CELL_TIMEOUT) --nbval-output-timeout=120 $(PYTEST_ARGS)

# The course's CUDA claims on this machine's NVIDIA GPU (README "Check a real NVIDIA GPU"); refuses
# in one line without CUDA. E.g. make gpu-check GPU_CHECK_ARGS=--quick. The card in a pair, the plain loop
# at 128 and a dated record for docs/measured/: .venv/bin/python -m harness.gpucheck --record docs/measured
GPU_CHECK_ARGS ?=
gpu-check: $(STAMP)
	$(BIN)/python -m hetlab gpu-check $(GPU_CHECK_ARGS)

# The GPU call of docs/gpu-machine.md (harness/gpucheck), every step, here without a GPU: the same code paths in a stand-in
# mode (Ray counts one GPU on the desktop node, the workers run on the CPU), tiny sizes; exits non-zero if a
# step fails. GPU_DRY_RUN_ARGS=--quick: the short form (no notebooks, one pair batch).
GPU_DRY_RUN_ARGS ?=
gpu-dry-run: $(STAMP)
	PYTHON=$(BIN)/python OUT=$${OUT:-/tmp/hetlab-gpu-dry-run} bash scripts/gpu_run.sh --dry-run $(GPU_DRY_RUN_ARGS)

bench: $(STAMP)
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
