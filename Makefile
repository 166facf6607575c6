# mkpy: `make run` and `make test` set everything up on a fresh Debian/Ubuntu machine.
PYTHON ?= /usr/bin/python3
# The suite is bound by clang compiling its kernels: test files run in one worker process per
# core (pytest-xdist), each file whole on one worker; every worker has its own kernel cache.
PYTEST_ARGS ?= -q -n auto --dist loadfile
BENCH_ARGS ?=

.PHONY: deps build run test test-gpu bench clean soak tsan ubsan fuzz-engine

deps:
	@sh scripts/install-deps.sh
	@PYTHON=$(PYTHON) sh scripts/fetch-nvrtc.sh

build: deps
	$(PYTHON) setup.py -q build_ext --inplace
	@MKPY_NO_SHARED_SERVER=1 PYTHONPATH=. $(PYTHON) -c "import mkpy; print(mkpy.metal.precompile_runtime())" \
	  || echo "note: no precompiled kernel runtime header; kernels still compile, more slowly"

run: build
	PYTHONPATH=. $(PYTHON) examples/quickstart.py

# MLX's Python package (mlx.nn, optimizers, utils; no compiled core) for the stand-in mode's
# tests, in a venv made from PyPI on first use; MKPY_TEST_MLX_VENV= (empty) skips those tests.
MKPY_TEST_MLX_VENV ?= $(HOME)/.cache/mkpy/test-mlx-venv
test: build
	@MKPY_TEST_MLX_VENV="$(MKPY_TEST_MLX_VENV)" PYTHON="$(PYTHON)" sh scripts/install-test-mlx.sh
	MKPY_TEST_MLX_VENV="$(MKPY_TEST_MLX_VENV)" PYTHONPATH=. $(PYTHON) -m pytest $(PYTEST_ARGS) tests

# Benchmarks (by hand, never part of `make test`): one table of same-run ratios,
# benchmarks/results.json and, with matplotlib, benchmarks/results.png.
# BENCH_ARGS="--quick" or "--only ops,launch" narrows the run. MLX's CPU build (the array
# section's side-by-side column) goes into the venv MKPY_BENCH_MLX_VENV names, made from PyPI
# on first use; MKPY_BENCH_MLX_VENV= (empty) runs without it.
MKPY_BENCH_MLX_VENV ?= $(HOME)/.cache/mkpy/bench-mlx-venv
bench: build
	@sh scripts/install-bench-deps.sh
	@MKPY_BENCH_MLX_VENV="$(MKPY_BENCH_MLX_VENV)" PYTHON="$(PYTHON)" sh scripts/install-bench-mlx.sh
	MKPY_BENCH_MLX_VENV="$(MKPY_BENCH_MLX_VENV)" PYTHONPATH=. $(PYTHON) benchmarks/run_all.py $(BENCH_ARGS)

# The engines' differential fuzzer (tests/kernel_fuzz.py, by hand; `make test` runs it for
# MKPY_FUZZ_ENGINE_SECONDS per seed): random well-defined kernels on the lockstep engine, the
# fiber engine and the checker, for FUZZ_SECONDS (or FUZZ_KERNELS kernels); FUZZ_SEED replays a
# run. A disagreement is reduced and printed as an entry for tests/data/fuzz_regressions.json.
# FUZZ_JOBS runs that many fuzz processes (seeds derived from FUZZ_SEED; one summary). FUZZ_ARGS
# passes more options (e.g. "--compact --per-compile 16"; kernel_fuzz.py --help).
FUZZ_SECONDS ?= 600
FUZZ_KERNELS ?=
FUZZ_SEED ?=
FUZZ_JOBS ?= 1
FUZZ_ARGS ?=
fuzz-engine: build
	PYTHONPATH=. nice $(PYTHON) tests/kernel_fuzz.py $(if $(FUZZ_KERNELS),--kernels $(FUZZ_KERNELS),--seconds $(FUZZ_SECONDS)) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) --jobs $(FUZZ_JOBS) $(FUZZ_ARGS)

# A longer multi-threaded run (by hand, never part of `make test`): 8 threads mixing ops,
# shared lazy graphs, cached and new kernels and short-lived threads, printing RSS,
# mappings and address space every few seconds. SOAK_SECONDS sets the length.
SOAK_SECONDS ?= 120
soak: build
	PYTHONPATH=. $(PYTHON) scripts/soak.py --seconds $(SOAK_SECONDS)

# The threading tests under ThreadSanitizer: the extension is built with
# -fsanitize=thread into $(TSAN_DIR) (the normal build is left alone), and Python,
# which is not instrumented, gets the TSan runtime through LD_PRELOAD (it must be
# loaded before anything else). Suppressions, each with its reason: scripts/tsan.supp.
CC ?= cc
TSAN_DIR ?= build-tsan
TSAN_TESTS ?= tests/test_threads.py tests/test_threads_gil.py tests/test_pool.py tests/test_eval.py
tsan: deps
	rm -rf $(TSAN_DIR)/mkpy
	mkdir -p $(TSAN_DIR)
	cp -r mkpy $(TSAN_DIR)/mkpy
	rm -rf $(TSAN_DIR)/mkpy/*.so $(TSAN_DIR)/mkpy/mkpy-cbs-pass $(TSAN_DIR)/mkpy/__pycache__
	MKPY_SANITIZE=thread $(PYTHON) setup.py -q build_ext --build-lib $(TSAN_DIR) --build-temp $(TSAN_DIR)/tmp
	LD_PRELOAD=$$($(CC) -print-file-name=libtsan.so) \
	TSAN_OPTIONS="suppressions=$(CURDIR)/scripts/tsan.supp halt_on_error=1 exitcode=66 second_deadlock_stack=1 $(TSAN_OPTIONS)" \
	PYTHONPATH=$(TSAN_DIR) $(PYTHON) -P -m pytest -q -p no:cacheprovider $(TSAN_TESTS)

# The suite under UndefinedBehaviorSanitizer: the extension is built with
# -fsanitize=undefined,float-cast-overflow into $(UBSAN_DIR) (the normal build is left alone);
# every report goes to $(UBSAN_DIR)/reports/ubsan.PID and any report fails the target.
# UBSAN_TESTS narrows the run (default: the whole suite).
UBSAN_DIR ?= build-ubsan
UBSAN_TESTS ?= tests
ubsan: deps
	rm -rf $(UBSAN_DIR)/mkpy $(UBSAN_DIR)/reports
	mkdir -p $(UBSAN_DIR)/reports
	cp -r mkpy $(UBSAN_DIR)/mkpy
	rm -rf $(UBSAN_DIR)/mkpy/*.so $(UBSAN_DIR)/mkpy/mkpy-cbs-pass* $(UBSAN_DIR)/mkpy/__pycache__ $(UBSAN_DIR)/mkpy/include/pch
	MKPY_SANITIZE=undefined $(PYTHON) setup.py -q build_ext --build-lib $(UBSAN_DIR) --build-temp $(UBSAN_DIR)/tmp
	UBSAN_OPTIONS="print_stacktrace=1 log_path=$(CURDIR)/$(UBSAN_DIR)/reports/ubsan $(UBSAN_OPTIONS)" \
	PYTHONPATH=$(UBSAN_DIR) $(PYTHON) -P -m pytest -p no:cacheprovider $(PYTEST_ARGS) $(UBSAN_TESTS); \
	rc=$$?; n=$$(cat $(UBSAN_DIR)/reports/ubsan.* 2>/dev/null | grep -c 'runtime error'); \
	echo "UBSan: $$n reports (in $(UBSAN_DIR)/reports)"; \
	[ $$rc = 0 ] && [ $$n = 0 ]

clean:
	rm -rf build build-tsan build-ubsan mkpy/*.so mkpy/mkpy-cbs-pass mkpy/include/pch mkpy/__pycache__ tests/__pycache__ *.egg-info

# On a machine with an NVIDIA GPU (never in CI): the GPU back-end's own tests, then the kernel
# test files with GPU streams on the GPU (they compare against NumPy and the CPU engine's
# documented results). MKPY_REQUIRE_GPU=1 turns a missing GPU into a failure.
GPU_TESTS ?= tests/test_gpu.py tests/test_gpu_ops.py tests/test_gpu_fast.py tests/test_gpu_idx.py tests/test_kernel_corpus.py tests/test_examples.py tests/test_kernel_engine.py \
	tests/test_simdgroup_matrix.py tests/test_kernel_exec.py tests/test_kernel_errors.py tests/test_kernel_parity.py \
	tests/test_runtime_header.py tests/test_fuzz_regressions.py tests/test_interop.py tests/test_gpu_cuda_kernel.py
test-gpu: build
	MKPY_REQUIRE_GPU=1 PYTHONPATH=. $(PYTHON) -m pytest $(PYTEST_ARGS) $(GPU_TESTS)
