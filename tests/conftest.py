"""Test session set-up: kernels compile into a fresh cache directory, so cache
counters and compile errors never depend on what an earlier run left behind."""
import os
import tempfile

os.environ["MKPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="mkpy-test-cache-")

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
