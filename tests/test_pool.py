"""The thread pool (csrc/core/pool.c): slices claimed dynamically by whichever
thread is free, the caller never waiting for a worker that has not joined.

The C stress program tests/cpp/test_pool.c includes pool.c and checks that
every slice / index runs exactly once under many small jobs, slow slices,
nested calls and several submitting threads. The Python tests run ops just
above the parallel threshold many times, and from several Python threads at
once (mk_eval runs without the GIL), against NumPy.
"""
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNDER_TSAN = "libtsan" in os.environ.get("LD_PRELOAD", "")
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(mx.__file__)))


def _cc():
    for name in [os.environ.get("CC", ""), "cc", "gcc", "clang"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def pool_binary(tmp_path_factory):
    cc = _cc()
    if cc is None:
        pytest.skip("no C compiler")
    exe = str(tmp_path_factory.mktemp("pool") / "test_pool")
    src = os.path.join(ROOT, "tests", "cpp", "test_pool.c")
    # under `make tsan` the stress program is itself built with ThreadSanitizer
    sanitize = ["-fsanitize=thread", "-g"] if UNDER_TSAN else []
    subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", *sanitize, "-I",
                    os.path.join(ROOT, "csrc"), src, "-o", exe], check=True, capture_output=True, timeout=120)
    return exe


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_pool_stress_c(pool_binary, threads):
    env = dict(os.environ, MKPY_NUM_THREADS=str(threads))
    env.pop("LD_PRELOAD", None)  # the program links its own TSan runtime when it has one
    r = subprocess.run([pool_binary], env=env, capture_output=True, text=True, timeout=600 if UNDER_TSAN else 120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok %d threads" % threads


def test_many_small_parallel_jobs():
    rng = np.random.default_rng(1)
    # just above one chunk (32768 elements) up to a few chunks
    for n in [32769, 65537, 100_000, 131_073]:
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        xa, xb = mx.array(a), mx.array(b)
        want_add, want_sum = a + b, np.sum(a.astype(np.float64))
        for _ in range(150):
            got = mx.add(xa, xb)
            s = mx.sum(xa)
            mx.eval(got, s)
            np.testing.assert_array_equal(np.array(got), want_add)
            assert abs(s.item() - want_sum) <= 1e-4 * np.abs(a).sum()


def test_jobs_from_several_python_threads():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((300, 1000)).astype(np.float32)
    x = mx.array(a)
    want = {
        "exp": np.exp(a),
        "sum0": a.astype(np.float64).sum(axis=0),
        "sum1": a.astype(np.float64).sum(axis=1),
        "softmax": np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True),
        "mul": a * a,
    }
    ops = {
        "exp": lambda: mx.exp(x),
        "sum0": lambda: mx.sum(x, axis=0),
        "sum1": lambda: mx.sum(x, axis=1),
        "softmax": lambda: mx.softmax(x, axis=-1),
        "mul": lambda: x * x,
    }
    errors = []

    def work(k):
        try:
            for i in range(40):
                name = list(ops)[(k + i) % len(ops)]
                got = np.array(ops[name]())
                np.testing.assert_allclose(got, want[name], rtol=2e-5, atol=1e-5)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


DETERMINISM = """
import numpy as np, mkpy as mx
rng = np.random.default_rng(0)
x = mx.array(rng.standard_normal(1_000_003).astype(np.float32) * 100 + 3)
y = mx.array(rng.standard_normal((3, 300_001)).astype(np.float32))
z = mx.array(rng.standard_normal((5000, 37)).astype(np.float32))
res = [mx.sum(x), mx.mean(x), mx.var(x), mx.sum(x[::3]), mx.sum(y, axis=1), mx.sum(z, axis=0),
       mx.mean(z, axis=0), mx.logsumexp(y, axis=-1), mx.softmax(y, axis=-1), mx.prod(y[:, :50], axis=1)]
print(";".join(np.array(r).tobytes().hex() for r in res))
"""


def test_results_do_not_depend_on_the_thread_count():
    """Reductions split their work by the problem's size only, so float sums group their terms
    the same way with any MKPY_NUM_THREADS."""
    outs = set()
    for threads in (1, 2, 3):
        # the mkpy under test (the tree, or `make tsan`'s instrumented build)
        env = dict(os.environ, PYTHONPATH=PKG_PARENT, MKPY_NUM_THREADS=str(threads))
        proc = subprocess.run([sys.executable, "-c", DETERMINISM], env=env, capture_output=True, text=True,
                              timeout=600, cwd=PKG_PARENT)
        assert proc.returncode == 0, proc.stderr
        outs.add(proc.stdout)
    assert len(outs) == 1
