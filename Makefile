# `make test` and `make demo` each create .venv when missing and install what they need first.
PYTHON_BIN ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
# The CPU build of torch lies on local disk; an unpinned torch would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install test demo benchmark clean

$(PYTHON):
	$(PYTHON_BIN) -m venv $(VENV)

$(INSTALLED): setup.py | $(PYTHON)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet "$(TORCH_SPEC)"
	echo "$(TORCH_SPEC)" > $(VENV)/torch-constraint.txt
	# Eager upgrades keep an existing .venv on the newest releases setup.py allows; the constraint keeps torch the CPU build.
	$(PYTHON) -m pip install --quiet --upgrade --upgrade-strategy eager -c $(VENV)/torch-constraint.txt -e ".[dev,viz,examples,spacy,onnx]"
	touch $(INSTALLED)

install: $(INSTALLED)

# Two workers (tests that share files use their own temporary folders); the slowest durations keep the time budget
# visible in the CI log.
PYTEST_WORKERS ?= 2

# The dependency-floors test runs the smoke subset in a second environment (.venv-floors); it is installed here,
# before pytest starts, and rebuilt only when setup.py's floors change.
# The package is byte-compiled first: with PYTHONDONTWRITEBYTECODE set (as here and in CI) every fresh interpreter of
# the suite (about 35) would otherwise compile it from source again, about a second each.
test: install
	TORCH_SPEC="$(TORCH_SPEC)" $(PYTHON) tests/scripts/floors_environment.py
	$(PYTHON) -m compileall -q hf_entity_models
	$(PYTHON) -m pytest -q -n $(PYTEST_WORKERS) --durations=30 tests

demo: install
	$(PYTHON) examples/demo.py

benchmark: install
	$(PYTHON) benchmarks/bench_petra_gap.py

clean:
	rm -rf $(VENV) build dist *.egg-info outputs
