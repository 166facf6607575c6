"""Test session set-up: kernels compile into a fresh cache directory, so cache
counters and compile errors never depend on what an earlier run left behind."""
import os
import sys
import tempfile

os.environ["MKPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="mkpy-test-cache-")
# `make test` is the CPU back-end's suite on every machine: where an NVIDIA GPU is found, GPU
# streams would run on it, and most of the suite (engines, caches, compile latency, debugging)
# tests the CPU's. `make test-gpu` (MKPY_REQUIRE_GPU=1) runs its files on the GPU.
# The compile servers shared across processes (a daemon per kind that outlives the process that
# started it) are off for the suite: a daemon left behind would outlive `make test`. The tests of
# that feature (tests/test_shared_servers.py) turn them on in their own processes, with a folder
# of their own and a short idle time, and stop every daemon they start.
os.environ["MKPY_NO_SHARED_SERVER"] = "1"
if os.environ.get("MKPY_REQUIRE_GPU") != "1":
    os.environ.setdefault("MKPY_GPU", "cpu")

import pytest  # noqa: E402


@pytest.fixture
def cpu_device():
    """Runs a test with the CPU as the default device (``mx.stream(mx.cpu)``), as MLX code must on a
    Mac for float64: GPU streams refuse it ("float64 is not supported on the GPU")."""
    import mkpy as mx

    with mx.stream(mx.cpu):
        yield


@pytest.fixture
def in_threads():
    """``in_threads(work, n=4)`` runs ``work(k)`` for k in range(n), each on its own thread, and
    re-raises the first failure once all have finished."""
    import threading

    def run(work, n=4):
        errors = []

        def wrap(k):
            try:
                work(k)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        ts = [threading.Thread(target=wrap, args=(k,)) for k in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]

    return run


# The CUDA compile tests (issue #24): every kernel these modules run on the CPU is also translated
# to CUDA C++ and compiled by NVRTC for sm_80 and sm_90 (MKPY_CUDA_COMPILE_CHECK), failing the eval
# with NVRTC's diagnostics. NVRTC needs no GPU; `make deps` unpacks it into mkpy/_nvrtc/.
CUDA_COMPILE_CHECK_MODULES = {"test_kernel_corpus", "test_examples", "test_simdgroup_matrix"}
CUDA_COMPILE_CHECK_ARCHS = "sm_80,sm_90"
_nvrtc = {}


def nvrtc_missing():
    """Why NVRTC cannot be had here (None when it compiles): probed once with a one-line kernel."""
    if "why" not in _nvrtc:
        import mkpy as mx

        k = mx.fast.metal_kernel(name="nvrtc_probe", input_names=["a"], output_names=["o"],
                                 source="o[0] = a[0];")
        old = os.environ.get("MKPY_CUDA_COMPILE_CHECK")
        os.environ["MKPY_CUDA_COMPILE_CHECK"] = "sm_80"
        try:
            mx.eval(k(inputs=[mx.array([1.0])], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                      output_dtypes=[mx.float32])[0])
            _nvrtc["why"] = None
        except RuntimeError as e:
            if "NVRTC could not be loaded" not in str(e):
                raise
            _nvrtc["why"] = str(e)
        finally:
            if old is None:
                del os.environ["MKPY_CUDA_COMPILE_CHECK"]
            else:
                os.environ["MKPY_CUDA_COMPILE_CHECK"] = old
    return _nvrtc["why"]


@pytest.fixture(autouse=True)
def cuda_compile_check(request, monkeypatch):
    import mkpy as mx

    # with a GPU, kernels compile for it and run there: no separate compile check
    if request.module.__name__.rsplit(".", 1)[-1] in CUDA_COMPILE_CHECK_MODULES and not mx.cuda.is_available():
        why = nvrtc_missing()
        if why is None:
            monkeypatch.setenv("MKPY_CUDA_COMPILE_CHECK", CUDA_COMPILE_CHECK_ARCHS)
        elif not _nvrtc.get("said"):
            _nvrtc["said"] = True
            print(f"\nnote: kernels are not compiled for CUDA in this run: {why}", file=sys.stderr)
    yield
