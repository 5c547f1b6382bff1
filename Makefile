# Two entry points: `make demo` (main job) and `make test` (whole test suite).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint venv clean gpu-check gpu-bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU wheel first, so the range in pyproject.toml is already satisfied.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/actlab reproduce --quick --out runs

# Two pytest processes: in one process, tests/test_models_cpu.py's ResNet test aborts with
# glibc heap corruption ("corrupted size vs. prev_size") after tests/test_[d-l]*.py have run,
# though every file passes on its own; until the cause is found the suite is split there.
test: $(STAMP)
	$(PY) -m pytest -q $(sort $(wildcard tests/test_[a-l]*.py))
	$(PY) -m pytest -q $(filter-out $(wildcard tests/test_[a-l]*.py),$(wildcard tests/test_*.py))

# On a GPU machine: the CUDA tests with the machine's own python3 (no venv, no install).
gpu-check:
	PYTHONPATH=src MPLBACKEND=Agg $(PYTHON) tools/gpu_check.py

# The GPU benchmark (one GPU, about 10 minutes with teacher-student --full); last line JSON.
gpu-bench:
	PYTHONPATH=src MPLBACKEND=Agg $(PYTHON) benchmarks/gpu.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs
