# The two commands of the README: `make demo` runs the main job on the embedded default (the
# simulated stack); `make test` runs the tests (what CI runs).
PYTHON ?= python3

.PHONY: install demo test lint bench

install:
	$(PYTHON) -m pip install -q -e '.[dev]'

# The demo needs the package alone; the test and lint tools come with `make install`/`make test`.
demo:
	$(PYTHON) -m pip install -q -e .
	inhouse up

test:
	bash scripts/test.sh

lint:
	ruff check src tests benchmarks scripts
	ruff format --check src tests benchmarks scripts
	mypy
	lint-imports

bench: install
	$(PYTHON) benchmarks/bench_predict.py
