"""The CUDA back-end on an NVIDIA GPU (`make test-gpu` runs this with the kernel test files).

Everything here needs a GPU and its driver: without one (CI) the module is skipped with the
reason printed, unless MKPY_REQUIRE_GPU=1 (make test-gpu), where a missing GPU fails.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if not mx.cuda.is_available():
    if os.environ.get("MKPY_REQUIRE_GPU") == "1":
        raise RuntimeError("MKPY_REQUIRE_GPU=1 but mx.cuda.is_available() is False")
    pytest.skip("no NVIDIA GPU here (mx.cuda.is_available() is False)", allow_module_level=True)


def run_py(code, env=None, timeout=300):
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=timeout)


DOUBLE = mx.fast.metal_kernel(name="gpu_double", input_names=["x"], output_names=["o"],
                              source="uint i = thread_position_in_grid.x; o[i] = x[i] * 2.0f + 1.0f;")


def double(x):
    o, = DOUBLE(inputs=[x], grid=(x.size, 1, 1), threadgroup=(256, 1, 1), output_shapes=[x.shape],
                output_dtypes=[x.dtype])
    return o


def test_environment_check_names_the_gpu():
    r = run_py("import mkpy.__main__ as m; m.main([])")
    line = [ln for ln in r.stdout.splitlines() if "NVIDIA GPU" in ln]
    assert line and "sm_" in line[0] and "GPU streams run there" in line[0], r.stdout


def test_kernel_runs_on_the_gpu_and_says_so(capsys):
    x = mx.arange(1000, dtype=mx.float32)
    o, = DOUBLE(inputs=[x], grid=(1000, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(1000,)],
                output_dtypes=[mx.float32], verbose=True)
    mx.eval(o)
    assert "runs on the GPU" in capsys.readouterr().out
    np.testing.assert_array_equal(np.array(o), np.arange(1000, dtype=np.float32) * 2 + 1)


def test_a_chain_of_kernels_copies_nothing_in_between():
    x = mx.arange(1 << 16, dtype=mx.float32)
    mx.eval(x)
    down0, up0 = mx.cuda._transfers()
    y = double(double(double(x)))
    mx.eval(y)
    down1, up1 = mx.cuda._transfers()
    assert (down1 - down0, up1 - up0) == (0, 1)  # x goes up once; nothing comes down
    want = ((np.arange(1 << 16, dtype=np.float32) * 2 + 1) * 2 + 1) * 2 + 1
    np.testing.assert_array_equal(np.array(y), want)
    down2, _ = mx.cuda._transfers()
    assert down2 - down1 == 1  # the host read copies once
    np.array(y)
    assert mx.cuda._transfers()[0] == down2  # and only once


def test_matmul_runs_through_cublas_and_stays_on_the_gpu():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 64, 48), dtype=np.float32), rng.standard_normal((48, 80), dtype=np.float32)
    A, B = mx.array(a), mx.array(b)
    c = A @ B
    d = double(c.reshape(-1)).reshape(c.shape)
    down0, _ = mx.cuda._transfers()
    mx.eval(d)
    assert mx.cuda._transfers()[0] == down0
    np.testing.assert_allclose(np.array(d), (a @ b) * 2 + 1, rtol=1e-4, atol=1e-4)
    # a transposed operand goes to cuBLAS as it lies
    np.testing.assert_allclose(np.array(A[0].T @ A[1]), a[0].T @ a[1], rtol=1e-4, atol=1e-4)


def test_ops_without_a_gpu_evaluator_run_on_the_cpu_and_are_named_once():
    r = run_py("""
        import mkpy as mx
        x = mx.array([3.0, 1.0, 2.0])
        for _ in range(3):
            y = mx.sort(x)
            mx.eval(y)
        print(y.tolist())
    """, env={"MKPY_DEBUG": "1"})
    assert r.returncode == 0, r.stderr
    assert "[1.0, 2.0, 3.0]" in r.stdout
    named = [ln for ln in r.stderr.splitlines() if "`sort` has no cuda implementation" in ln]
    assert len(named) == 1, r.stderr


PARITY = """
import sys
import numpy as np
import mkpy as mx
rng = np.random.default_rng(7)
out = {}
k = mx.fast.metal_kernel(name="par_int", input_names=["a", "b"], output_names=["o"], source='''
    uint i = thread_position_in_grid.x;
    int v = a[i] * 31 + (b[i] >> 3) - (a[i] ^ b[i]);
    o[i] = v / (int(i % 7) + 1) + simd_shuffle_xor(v, 5);
''')
a = mx.array(rng.integers(-1000, 1000, 4099).astype(np.int32))
b = mx.array(rng.integers(0, 1 << 20, 4099).astype(np.int32))
out["int"], = k(inputs=[a, b], grid=(4099, 1, 1), threadgroup=(128, 1, 1), output_shapes=[(4099,)],
                output_dtypes=[mx.int32])
k2 = mx.fast.metal_kernel(name="par_float", input_names=["x"], output_names=["o"], source='''
    uint i = thread_position_in_grid.x;
    float v = x[i];
    o[i] = (v * 1.5f + 0.25f) * v - v / 3.0f;
''')
x = mx.array(rng.standard_normal(5000).astype(np.float32))
out["float"], = k2(inputs=[x], grid=(5000, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(5000,)],
                   output_dtypes=[mx.float32])
k3 = mx.fast.metal_kernel(name="par_tiles", input_names=["x"], output_names=["o"], source='''
    threadgroup float t[256];
    uint l = thread_position_in_threadgroup.x;
    t[l] = x[thread_position_in_grid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    o[thread_position_in_grid.x] = t[255 - l] * 2.0f + t[(l + 1) % 256];
''')
out["tiles"], = k3(inputs=[x[:4096]], grid=(4096, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(4096,)],
                   output_dtypes=[mx.float32])
np.savez(sys.argv[1], **{k: np.array(v) for k, v in out.items()})
"""


def test_results_equal_the_cpu_engine_bit_for_bit(tmp_path):
    script = tmp_path / "parity.py"
    script.write_text(PARITY)
    files = {}
    for name, env in (("gpu", {}), ("cpu", {"MKPY_GPU": "cpu"})):
        f = tmp_path / (name + ".npz")
        e = dict(os.environ, PYTHONPATH=ROOT, **env)
        r = subprocess.run([sys.executable, str(script), str(f)], env=e, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        files[name] = np.load(f)
    for key in files["cpu"].files:
        assert files["gpu"][key].tobytes() == files["cpu"][key].tobytes(), key


def test_a_fault_raises_at_eval_and_the_process_goes_on():
    # in a child: after an illegal address CUDA may refuse the GPU to the rest of the process
    r = run_py("""
        import numpy as np
        import mkpy as mx
        bad = mx.fast.metal_kernel(name="gpu_wild_store", input_names=["x"], output_names=["o"],
                                   source="o[ulong(1) << 40 | thread_position_in_grid.x] = x[0];")
        good = mx.fast.metal_kernel(name="gpu_double", input_names=["x"], output_names=["o"],
                                    source="uint i = thread_position_in_grid.x; o[i] = x[i] * 2.0f + 1.0f;")
        x = mx.ones((4,))
        o, = bad(inputs=[x], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])
        try:
            mx.eval(o)
            print("no error")
        except RuntimeError as e:
            print("raised:", e)
        y, = good(inputs=[mx.arange(8, dtype=mx.float32)], grid=(8, 1, 1), threadgroup=(8, 1, 1),
                  output_shapes=[(8,)], output_dtypes=[mx.float32])
        print("after:", np.array(y).tolist(), "gpu:", mx.cuda.is_available())
    """)
    assert r.returncode == 0, r.stderr
    assert "raised:" in r.stdout and "gpu_wild_store" in r.stdout, r.stdout
    assert "after: [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]" in r.stdout, r.stdout


SPIN = mx.fast.metal_kernel(name="gpu_spin", input_names=["n"], output_names=["o"], source="""
    // spins for as long as n says (the caller passes a huge n)
    uint s = 0;
    for (uint i = 0; i < uint(n); ++i) s = s * 1664525u + 1013904223u;
    o[thread_position_in_grid.x] = float(s & 1u);
""")


def spin():
    o, = SPIN(inputs=[mx.array(2 ** 31 - 1, dtype=mx.int32)], grid=(1 << 16, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[(1 << 16,)], output_dtypes=[mx.float32])
    return o


def test_ctrl_c_stops_a_long_kernel():
    # another kernel first: the hang seen once came only after one had run
    np.testing.assert_array_equal(np.array(double(mx.arange(4, dtype=mx.float32))), [1, 3, 5, 7])
    # Python's handler, also when the test process was started with SIGINT ignored (a background job)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            mx.eval(spin())
    finally:
        t.cancel()
        signal.signal(signal.SIGINT, old)
    np.testing.assert_array_equal(np.array(double(mx.arange(4, dtype=mx.float32))), [1, 3, 5, 7])


def test_the_kernel_timeout_stops_a_long_kernel():
    r = run_py("""
        import mkpy as mx
        k = mx.fast.metal_kernel(name="gpu_spin", input_names=["n"], output_names=["o"], source='''
            uint s = 0;
            for (uint i = 0; i < uint(n); ++i) s = s * 1664525u + 1013904223u;
            o[thread_position_in_grid.x] = float(s & 1u);
        ''')
        o, = k(inputs=[mx.array(2 ** 31 - 1, dtype=mx.int32)], grid=(1 << 16, 1, 1), threadgroup=(256, 1, 1),
               output_shapes=[(1 << 16,)], output_dtypes=[mx.float32])
        try:
            mx.eval(o)
        except RuntimeError as e:
            print("raised:", e)
        print("after:", mx.cuda.is_available(), (mx.arange(3) * 2).tolist())
    """, env={"MKPY_KERNEL_TIMEOUT": "0.5"})
    assert "raised:" in r.stdout and "MKPY_KERNEL_TIMEOUT" in r.stdout, (r.stdout, r.stderr)
    assert "context was reset" in r.stdout, r.stdout
    assert "after: True [0, 2, 4]" in r.stdout, r.stdout


def test_compile_errors_use_the_words_of_metals_compiler():
    # NVRTC words diagnostics its own way; Metal's compiler is clang, as the CPU back-end's
    k = mx.fast.metal_kernel(name="gpu_undeclared", input_names=["x"], output_names=["o"],
                             source="uint i = thread_position_in_grid.x;\no[i] = y[i];")
    o, = k(inputs=[mx.ones((4,))], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
           output_dtypes=[mx.float32])
    with pytest.raises(RuntimeError) as e:
        mx.eval(o)
    assert "use of undeclared identifier 'y'" in str(e.value) and "<kernel gpu_undeclared source>:2" in str(e.value)


def test_a_kernel_that_needs_a_piece_its_names_do_not_show_compiles_with_the_whole_header():
    # the program leaves out the runtime header's pieces whose names the kernel does not use
    # (backend/cuda/parts.c); a name made by token pasting is not seen, NVRTC refuses the program,
    # and the build compiles it again with every piece (MKPY_DEBUG=1 says so)
    r = run_py("""
        import mkpy as mx
        k = mx.fast.metal_kernel(name="gpu_pasted", input_names=["x"], output_names=["o"],
                                 header="#define CAT(a, b) a##b\\n",
                                 source="uint i = thread_position_in_grid.x; o[i] = metal::CAT(ex, p)(x[i]);")
        o, = k(inputs=[mx.zeros((4,))], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
               output_dtypes=[mx.float32])
        print(o.tolist())
    """, env={"MKPY_DEBUG": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[1.0, 1.0, 1.0, 1.0]"
    assert "compiled again with all of them" in r.stderr


def test_divergent_barriers_raise_on_the_gpu_and_the_gpu_goes_on():
    k = mx.fast.metal_kernel(name="gpu_diverge", input_names=["x"], output_names=["o"], source="""
        uint l = thread_position_in_threadgroup.x;
        if (l < 40) threadgroup_barrier(mem_flags::mem_threadgroup);
        else threadgroup_barrier(mem_flags::mem_threadgroup);
        o[thread_position_in_grid.x] = x[thread_position_in_grid.x];""")
    for _ in range(2):
        o, = k(inputs=[mx.ones((256,))], grid=(256, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(256,)],
               output_dtypes=[mx.float32])
        with pytest.raises(RuntimeError) as e:
            mx.eval(o)
        msg = str(e.value)
        assert "(GPU)" in msg and "different barriers" in msg, msg
        assert "<kernel gpu_diverge source>:3:" in msg and "<kernel gpu_diverge source>:4:" in msg, msg
    assert mx.cuda.is_available()
    np.testing.assert_array_equal(np.array(double(mx.arange(4, dtype=mx.float32))), [1, 3, 5, 7])


def test_mkpy_gpu_cpu_keeps_the_cpu_back_end():
    r = run_py("import mkpy as mx; print(mx.cuda.is_available())", env={"MKPY_GPU": "cpu"})
    assert r.stdout.strip() == "False", r.stderr


PARITY_MODE = '''
import numpy as np
import mkpy as mx
k = mx.fast.metal_kernel(name="par_mode", input_names=["x"], output_names=["o", "gap"], source="""
    uint i = thread_position_in_grid.x;
    o[i] = metal::exp(x[i]) + simd_sum(x[i]);
    if (i % 2 == 0) gap[i] = 1.0f;   // odd elements never written: equal on both sides
""")
x = mx.random.normal((1000,))
o, g = k(inputs=[x], grid=(1000, 1, 1), threadgroup=(128, 1, 1), output_shapes=[(1000,), (1000,)],
         output_dtypes=[mx.float32, mx.float32])
mx.eval(o, g)
print("ok", bool(np.isfinite(np.array(o)).all()))
'''


def test_parity_mode_runs_the_cpu_engine_beside_the_gpu():
    r = run_py(PARITY_MODE, env={"MKPY_GPU_PARITY": "1"})
    assert r.returncode == 0 and "ok True" in r.stdout, (r.stdout, r.stderr)


def test_cache_memory_counts_and_clears_the_gpus_freed_blocks():
    x = mx.arange(4096, dtype=mx.float32)
    mx.eval(x)
    old = mx.set_cache_limit(0)
    try:
        y = mx.abs(x)  # a fresh device buffer (x is held)
        mx.eval(y)
        del y
        mx.synchronize()
        assert mx.get_cache_memory() == 0
    finally:
        mx.set_cache_limit(old)
    y = mx.abs(x)
    mx.eval(y)
    del y
    mx.synchronize()
    assert mx.get_cache_memory() >= 4096 * 4
    mx.clear_cache()
    assert mx.get_cache_memory() == 0


def test_elementwise_ops_write_over_a_temporary_on_the_gpu():
    n = 1 << 20
    xn = np.linspace(-2, 2, n, dtype=np.float32)
    cn, zn = xn > 0.5, np.full(n, 7, np.float32)
    x, c, z = mx.array(xn), mx.array(cn), mx.array(zn)
    mx.eval(x, c, z)
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    y = x * 2
    for _ in range(5):
        y = mx.abs(y)
        y = (y + 1).astype(mx.int32).astype(mx.float32)  # same-size casts donate too
        y = mx.where(c, y, z)
    mx.eval(y)
    assert mx.get_peak_memory() - base < 1.5 * xn.nbytes, (mx.get_peak_memory() - base) / xn.nbytes
    want = xn * 2
    for _ in range(5):
        want = np.where(cn, (np.abs(want) + 1).astype(np.int32).astype(np.float32), zn)
    np.testing.assert_array_equal(np.array(y), want)
    assert np.array_equal(np.array(x), xn)



def test_adopted_host_memory_goes_up_on_first_gpu_use_and_stays_the_callers():
    # mx.asarray(a, copy=False) adopts a's memory as a host buffer, as a loaded array is one: the
    # first GPU op reading it takes a device copy (once), host reads keep reading a's memory, and
    # the buffer is released, never recycled (MLX's test_adopt_in_loop_not_recycled)
    a = np.arange(1 << 16, dtype=np.float32)
    x = mx.asarray(a, copy=False)
    a[3] = -1  # before any GPU use: seen by the GPU ops
    down0, up0 = mx.cuda._transfers()
    y, z = x * x, x + x  # (no scalar operands: each would go up too)
    mx.eval(y)
    mx.eval(z)
    assert mx.cuda._transfers()[1] - up0 == 1  # one copy up for both ops
    assert y[3].item() == 1 and z[3].item() == -2
    a[4] = 50
    assert x[4].item() == 50 and np.array(x)[4] == 50  # host reads see the caller's memory
    del x, y, z
    w = mx.random.normal((64, 64), key=mx.random.key(0))
    wn = np.array(w).astype(np.float64)
    for i in range(100):
        b = np.random.default_rng(i).random((256, 64), dtype=np.float32)
        r = mx.sum(mx.asarray(b, copy=False) @ w)
        p = b @ wn
        assert abs(r.item() - p.sum()) <= 1e-5 * np.abs(p).sum()  # float32 sums' rounding
    assert a[3] == -1 and a[4] == 50 and a[5] == 5
