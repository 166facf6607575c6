"""The GIL and mkpy's own waits (docs/design.md "Threads: no Python under the
released GIL"). A thread inside an evaluation holds mkpy state others may wait
for (a node it runs, the checker's lock, a kernel the JIT builds). Before, it
called into Python from there (verbose lines, what a kernel printed, cache
warnings, a custom function's closure), taking the GIL: a thread that held the
GIL and waited for that state deadlocked with it, and Python code run there
(sys.stdout.write) could wait for the node its own thread was running. Now
those calls are deferred until the thread holds the GIL again, and no
evaluation runs with the GIL held.

Each scenario runs in a child process with a hard timeout, so that a deadlock
fails the test (with every thread's stack) instead of hanging the suite. The
stress loops are bounded in time (about 3 s), never timed."""
import os
import subprocess
import sys
import textwrap

import mkpy as mx

PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(mx.__file__)))
UNDER_TSAN = "libtsan" in os.environ.get("LD_PRELOAD", "")

COMMON = r'''
import faulthandler, gc, sys, threading, time, weakref
import numpy as np
import mkpy as mx

faulthandler.dump_traceback_later(float(sys.argv[1]), exit=True)  # a deadlock: every stack, then exit
# the threads share lazy nodes: as in MLX, on a thread-unsafe stream (one thread cannot evaluate
# nodes of another thread's own streams)
SHARED = mx.new_thread_unsafe_stream(mx.gpu)
mx.set_default_stream(SHARED)

# a slow kernel (a loop per thread) that makes a random key [x0, x1] and says
# which engine runs it (verbose), so that a key is still being made while
# other threads want it
KEY = mx.fast.metal_kernel(name="gil_key", input_names=["x"], output_names=["y"], source="""
    uint i = thread_position_in_grid.x;
    float acc = 0.0f;
    for (int j = 0; j < SPIN; j++) acc += metal::precise::sin(float(j) * 0.001f + x[i]);
    y[i] = uint(x[i]) + (acc > 1e30f ? 1u : 0u);""")
# a kernel that prints (os_log): its messages reach sys.stdout after the launch
SAY = mx.fast.metal_kernel(name="gil_say", input_names=["x"], output_names=["y"], source="""
    uint i = thread_position_in_grid.x;
    if (i == 0) os_log_default.log("gil_say says %d", int(x[0]));
    y[i] = x[i] + 1.0f;""")


def make_key(a, b, spin=20000):
    y, = KEY(inputs=[mx.array([a, b], dtype=mx.float32)], template=[("SPIN", spin)], grid=(2, 1, 1),
             threadgroup=(2, 1, 1), output_shapes=[(2,)], output_dtypes=[mx.uint32], verbose=True)
    return y


class Out:
    """sys.stdout whose write() calls into mkpy: it evaluates the latest
    shared lazy array (which may depend on the kernel whose line it is
    writing) and reads the kernel cache's counters."""

    def __init__(self, real):
        self.real, self.lines, self.mu = real, [], threading.Lock()
        self.pending = None

    def write(self, text):
        p = self.pending
        if p is not None:
            mx.eval(p + 1)
        mx.metal.kernel_cache_info()
        with self.mu:
            self.lines.append(text)
        return len(text)

    def flush(self):
        pass


def run(fns, seconds):
    errors = []

    def wrap(fn):
        try:
            mx.set_default_stream(SHARED)
            fn()
        except BaseException:  # noqa: BLE001 - reported below
            import traceback
            errors.append(traceback.format_exc())

    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        print("ERRORS", *errors, file=sys.__stdout__)
        sys.exit(3)
'''

STRESS = COMMON + r'''
out = Out(sys.stdout)
sys.stdout = out
deadline = time.monotonic() + float(sys.argv[2])
made = [0, 0]          # key kernels launched (each node runs once: one verbose line each)
said = [0]             # printing kernels launched
keys = []              # lazy keys, shared between threads
keys_mu = threading.Lock()


def maker(t):
    n = 0
    while n < 6 or time.monotonic() < deadline:
        a, b = 7 * n + t, 1000 + n
        y = make_key(a, b)
        with keys_mu:
            keys.append((y, a, b))
        out.pending = y
        mx.eval(y)  # verbose: prints its engine line while other threads want y
        assert np.array(y).tolist() == [a, b]
        made[t] += 1
        n += 1


def random_user():
    # the global key set to a key still being made: before, the next draw
    # evaluated it holding the GIL and waited for the maker, which waited for
    # the GIL to print
    n = 0
    while n < 6 or time.monotonic() < deadline:
        with keys_mu:
            item = keys[-1] if keys else None
        if item is not None:
            y, a, b = item
            mx.random.state[0] = y
            assert mx.random.state[0].tolist() == [a, b]
            u = mx.random.uniform(shape=(4,)).tolist()
            assert all(0.0 <= v < 1.0 for v in u), u
        n += 1


def printer():
    n = 0
    while n < 6 or time.monotonic() < deadline:
        y, = SAY(inputs=[mx.array([float(n), 0.0])], grid=(2, 1, 1), threadgroup=(2, 1, 1),
                 output_shapes=[(2,)], output_dtypes=[mx.float32])
        assert np.array(y).tolist() == [n + 1.0, 1.0]
        said[0] += 1
        n += 1


def customs():
    # custom functions whose nodes die on whichever thread evaluates them:
    # their closures are dropped by a thread holding the GIL, none is kept
    refs = []
    n = 0
    while n < 6 or time.monotonic() < deadline:
        @mx.custom_function
        def f(x):
            return x * x

        @f.vjp
        def f_vjp(primals, cotangent, output):
            return 2 * primals * cotangent  # (one input: primals is that array)

        g = mx.grad(lambda x: f(x).sum())(mx.array([1.0, 2.0, float(n)]))
        assert g.tolist() == [2.0, 4.0, 2.0 * n]
        refs.append(weakref.ref(f_vjp))
        del f, f_vjp, g
        n += 1
    return refs


refs_box = []
run([lambda: maker(0), lambda: maker(1), random_user, printer, lambda: refs_box.extend(customs())],
    float(sys.argv[2]))
sys.stdout = out.real
mx.eval(mx.ones(1))  # (flushes anything still deferred)
gc.collect()
text = "".join(out.lines)
engine_lines = text.count("`gil_key` runs on")
said_lines = text.count("gil_say says")
alive = sum(1 for r in refs_box if r() is not None)
print("RESULT", sum(made), engine_lines, said[0], said_lines, len(refs_box), alive)
'''


def run_child(script, *args, timeout):
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    p = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, cwd=PKG_PARENT,
                       capture_output=True, text=True, timeout=timeout + 60)
    assert "Timeout (" not in p.stderr, "deadlock; the threads' stacks:\n" + p.stderr[-6000:]
    assert p.returncode == 0, (p.returncode, p.stdout[-3000:], p.stderr[-6000:])
    return p.stdout


def test_stress_verbose_printing_kernels_random_state_and_stdout_calling_mkpy():
    # a few seconds of: two threads making keys with a slow verbose kernel,
    # one setting the global random key to the newest (still being made) and
    # drawing, one running a kernel that prints, one making and dropping
    # custom functions; sys.stdout itself evaluates arrays and reads the
    # cache's counters
    hang_after = 240 if UNDER_TSAN else 120
    out = run_child(STRESS, hang_after, 3, timeout=hang_after)
    made, engine_lines, said, said_lines, customs, alive = map(int, out.split("RESULT")[1].split())
    assert made >= 12 and said >= 6 and customs >= 6
    assert engine_lines == made  # each node ran once, each line was written once
    assert said_lines == said
    assert alive == 0  # every custom function's closure was dropped


TARGETED = COMMON + r'''
# 1. sys.stdout.write evaluates an array that needs the node whose verbose
#    line it writes: before, the writing thread waited for itself
out = Out(sys.stdout)
sys.stdout = out
y = make_key(3, 4, spin=2000)
out.pending = y
mx.eval(y)
sys.stdout = out.real
assert any("`gil_key` runs on" in l for l in out.lines), out.lines
assert y.tolist() == [3, 4]

# 2. the global key set to a key another thread is making (verbose): the
#    draw must not wait for it holding the GIL
started = threading.Event()
k = make_key(5, 6, spin=400000)  # long enough to be running when the draw comes


def slow():
    started.set()
    mx.eval(k)


t = threading.Thread(target=slow)
t.start()
started.wait()
time.sleep(0.05)
mx.random.state[0] = k
u = mx.random.uniform(shape=(3,))
t.join()
assert k.tolist() == [5, 6]
mx.random.state[0] = mx.array([5, 6], dtype=mx.uint32)
assert np.array_equal(np.array(u), np.array(mx.random.uniform(shape=(3,))))
print("OK")
'''


def test_stdout_that_calls_mkpy_and_a_draw_from_a_key_being_made():
    out = run_child(TARGETED, 120, timeout=120)
    assert out.strip().endswith("OK"), out


def test_the_gil_is_released_while_an_op_evaluates():
    # a long evaluation of ordinary ops (no kernel): the main thread keeps
    # running Python meanwhile
    import threading

    import numpy as np
    a = np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32)
    x = mx.array(a)
    # built here, evaluated on another thread: on a thread-unsafe stream, as MLX needs
    with mx.stream(mx.new_thread_unsafe_stream(mx.gpu)):
        y = mx.zeros_like(x)
        for i in range(40):  # 40 independent products (no error carried from one to the next)
            y = y + mx.tanh((x @ x) * (1.0 / (i + 1)))
    started, done = threading.Event(), threading.Event()

    def evaluate():
        started.set()
        try:
            mx.eval(y)
        finally:
            done.set()

    t = threading.Thread(target=evaluate)
    t.start()
    started.wait()
    spins = 0
    while not done.is_set():  # pure Python: runs only while the evaluating thread lets go of the GIL
        spins += 1
    t.join()
    aa = a.astype(np.float64) @ a
    ref = sum(np.tanh(aa / (i + 1)) for i in range(40))
    np.testing.assert_allclose(np.array(y), ref, rtol=1e-4, atol=1e-3)
    assert spins > 10000
