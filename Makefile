# Two entry points: `make demo` (main job) and `make test` (whole test suite);
# `make test-fast` leaves out the tests marked slow, for the edit-test loop.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint venv clean gpu-check gpu-bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU wheel first, so the range in pyproject.toml is already satisfied.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/actlab reproduce --quick --out runs --overwrite

# One pytest-xdist worker per core; the tests that start processes of their own share one
# worker, and a module's shared fixture stays on one (tests/conftest.py).
PYTEST := $(PY) -m pytest -q -n auto --dist loadgroup

test: $(STAMP)
	$(PYTEST)

test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

# On a GPU machine: the CUDA tests with the machine's own python3 (no venv, no install).
gpu-check:
	PYTHONPATH=src MPLBACKEND=Agg $(PYTHON) tools/gpu_check.py

# The GPU benchmarks (one GPU, about 10 minutes with teacher-student --full): the engine and
# GPT figures, then the sparsity mechanisms by CUDA events; each prints its JSON line last.
gpu-bench:
	PYTHONPATH=src MPLBACKEND=Agg $(PYTHON) benchmarks/gpu.py
	PYTHONPATH=src MPLBACKEND=Agg $(PYTHON) benchmarks/gpu_mechanisms.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks tools

clean:
	rm -rf $(VENV) runs
