# mkpy: `make run` and `make test` set everything up on a fresh Debian/Ubuntu machine.
PYTHON ?= /usr/bin/python3
PYTEST_ARGS ?= -q
BENCH_ARGS ?=

.PHONY: deps build run test bench clean

deps:
	@sh scripts/install-deps.sh

build: deps
	$(PYTHON) setup.py -q build_ext --inplace
	@PYTHONPATH=. $(PYTHON) -c "import mkpy; print(mkpy.metal.precompile_runtime())" \
	  || echo "note: no precompiled kernel runtime header; kernels still compile, more slowly"

run: build
	PYTHONPATH=. $(PYTHON) examples/quickstart.py

test: build
	PYTHONPATH=. $(PYTHON) -m pytest $(PYTEST_ARGS) tests

# Benchmarks (by hand, never part of `make test`): one table of same-run ratios,
# benchmarks/results.json and, with matplotlib, benchmarks/results.png.
# BENCH_ARGS="--quick" or "--only ops,launch" narrows the run.
bench: build
	@sh scripts/install-bench-deps.sh
	PYTHONPATH=. $(PYTHON) benchmarks/run_all.py $(BENCH_ARGS)

clean:
	rm -rf build mkpy/*.so mkpy/mkpy-cbs-pass mkpy/include/pch mkpy/__pycache__ tests/__pycache__ *.egg-info
