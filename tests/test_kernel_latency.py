"""Compile latency: where a compile's time goes (MKPY_DEBUG), the linker run without the
compiler driver, the region-splitting pass and clang kept up as servers, and a sweep's
variants compiled in parallel landing in the disk cache."""
import concurrent.futures
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_PASS = os.path.exists(os.path.join(ROOT, "mkpy", "mkpy-cbs-pass"))
HAVE_ZYGOTE = os.path.exists(os.path.join(ROOT, "mkpy", "libmkpy-cc-zygote.so"))
needs_pass = pytest.mark.skipif(not HAVE_PASS, reason="mkpy was built without LLVM: no lockstep pass "
                                                      "(mkpy/mkpy-cbs-pass), cooperative kernels run on fibers")

COOP = """
    uint i = thread_position_in_grid.x;
    threadgroup float part[2];
    float v = simd_sum(inp[i]) * SCALE;
    if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = part[0] + part[1];
"""


def _child(code, env_extra, cache_dir):
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_CACHE_DIR=str(cache_dir), **env_extra)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


@needs_pass
def test_debug_names_the_compile_stages(tmp_path):
    code = """
import mkpy as mx
x = mx.arange(64, dtype=mx.float32)
k = mx.fast.metal_kernel(name="stages_plain", input_names=["inp"], output_names=["out"],
                         source="out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] + 2.0f;")
c = mx.fast.metal_kernel(name="stages_coop", input_names=["inp"], output_names=["out"], source='''%s''')
o, = k(inputs=[x], grid=(64, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(64,)], output_dtypes=[mx.float32])
p, = c(inputs=[x], template=[("SCALE", 1)], grid=(64, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(64,)],
       output_dtypes=[mx.float32])
mx.eval(o, p)
assert o.tolist() == [v + 2.0 for v in range(64)]
assert p.tolist() == [float(sum(range(64)))] * 64
""" % COOP
    err = _child(code, {"MKPY_DEBUG": "1"}, tmp_path).stderr
    stages = [line for line in err.splitlines() if "compile stages:" in line]
    assert len(stages) == 2, err
    plain = next(s for s in stages if "stages_plain" in s)
    coop = next(s for s in stages if "stages_coop" in s)
    for s in (plain, coop):
        for name in ("translate", "cache look-up", "link", "load"):
            assert name + " " in s and " ms" in s, s
    assert "clang (front end, optimisation, code generation)" in plain, plain
    assert "clang front end" in coop and "lockstep pass, optimisation, code generation" in coop, coop


def test_linking_without_the_driver_gives_the_same_bits(tmp_path):
    code = """
import numpy as np, sys
import mkpy as mx
x = mx.array(np.linspace(-3, 3, 1000, dtype=np.float32))
k = mx.fast.metal_kernel(name="link_same", input_names=["inp"], output_names=["out"],
    source="uint i = thread_position_in_grid.x; out[i] = metal::exp(inp[i]) * metal::sin(inp[i]) + 0.1f;")
o, = k(inputs=[x], grid=(1000, 1, 1), threadgroup=(100, 1, 1), output_shapes=[(1000,)], output_dtypes=[mx.float32])
sys.stdout.write(np.array(o).tobytes().hex())
"""
    a = _child(code, {}, tmp_path / "direct").stdout
    b = _child(code, {"MKPY_LINK_WITH_DRIVER": "1"}, tmp_path / "driver").stdout
    assert a and a == b


def _running(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _servers(pid, kind="pass"):
    """The servers that are children of process pid: kind "pass" (mkpy-cbs-pass --serve) or
    "cc" (clang kept started with libmkpy-cc-zygote.so preloaded)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().split(b"\0")
            if kind == "cc":
                with open("/proc/%s/maps" % d) as f:
                    if "libmkpy-cc-zygote.so" in f.read():
                        out.append(int(d))
            elif cmd and cmd[0].endswith(b"mkpy-cbs-pass") and b"--serve" in cmd:
                out.append(int(d))
        except (OSError, IndexError, ValueError):
            continue
    return out


SERVERS_SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, HERE)
from test_kernel_latency import COOP, _servers
import mkpy as mx
x = mx.arange(64, dtype=mx.float32)
c = mx.fast.metal_kernel(name="pass_server", input_names=["inp"], output_names=["out"], source=COOP)
def run(scale):
    p, = c(inputs=[x], template=[("SCALE", scale)], grid=(64, 1, 1), threadgroup=(64, 1, 1),
           output_shapes=[(64,)], output_dtypes=[mx.float32], verbose=True)
    mx.eval(p)
    assert p.tolist() == [float(sum(range(64))) * scale] * 64
me = os.getpid()
run(1)
first = {k: _servers(me, k) for k in ("pass", "cc")}
assert all(len(v) == 1 for v in first.values()), first
run(2)
assert {k: _servers(me, k) for k in ("pass", "cc")} == first
for pids in first.values():
    os.kill(pids[0], signal.SIGKILL)
time.sleep(0.2)
run(3)   # the idle servers are gone: fresh ones take the kernel, on the lockstep engine
now = {k: _servers(me, k) for k in ("pass", "cc")}
assert all(len(v) == 1 for v in now.values()) and now != first, now
os.environ["MKPY_TEST_SERVER_ENV"] = "1"  # the environment goes with each compiler request
run(4)
assert _servers(me, "cc") == now["cc"]
os.environ["LD_LIBRARY_PATH"] = "/nonexistent-mkpy-test"  # the loader's: a server started under others retires
run(5)
assert _servers(me, "cc") != now["cc"] and len(_servers(me, "cc")) == 1
print("servers", *(_servers(me) + _servers(me, "cc")))
print(mx.metal.kernel_cache_info()["compiles"])
"""


@needs_pass
@pytest.mark.skipif(not HAVE_ZYGOTE, reason="no mkpy/libmkpy-cc-zygote.so (built on Linux only)")
def test_servers_are_reused_and_a_dead_one_is_replaced(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    p = _child(SERVERS_SCRIPT.replace("HERE", repr(here)), {"MKPY_NO_SHARED_SERVER": "1"}, tmp_path)
    assert p.stdout.split()[-1] == "5"
    engines = [line for line in p.stdout.splitlines() if "runs on" in line]
    assert len(engines) == 5 and all("lockstep" in line for line in engines), p.stdout
    # the process is gone: so are its servers (their input ended; a zombie waits for init)
    pids = [int(v) for line in p.stdout.splitlines() if line.startswith("servers") for v in line.split()[1:]]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(_running(pid) for pid in pids)


BITS_SCRIPT = """
import numpy as np, sys
import mkpy as mx
x = mx.array(np.linspace(-3, 3, 1024, dtype=np.float32))
k = mx.fast.metal_kernel(name="server_bits", input_names=["inp"], output_names=["out"], source=COOP_SRC)
o, = k(inputs=[x], template=[("SCALE", 3)], grid=(1024, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(1024,)],
       output_dtypes=[mx.float32])
e = mx.fast.metal_kernel(name="server_exp", input_names=["inp"], output_names=["out"],
    source="uint i = thread_position_in_grid.x; out[i] = metal::exp(inp[i]) * metal::sin(inp[i]);")
q, = e(inputs=[x], grid=(1024, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(1024,)], output_dtypes=[mx.float32])
bad = mx.fast.metal_kernel(name="server_bad", input_names=["inp"], output_names=["out"],
                           source="out[0] = inp[0] + undefined_name;")
b, = bad(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])
try:
    mx.eval(b)
except RuntimeError as err:
    assert "undefined_name" in str(err), str(err)
    print("error ok")
sys.stdout.write(np.array(o).tobytes().hex() + np.array(q).tobytes().hex())
"""


def test_servers_give_the_same_bits_and_errors_as_programs(tmp_path):
    code = BITS_SCRIPT.replace("COOP_SRC", repr(COOP))
    a = _child(code, {}, tmp_path / "servers").stdout
    b = _child(code, {"MKPY_NO_CC_SERVER": "1", "MKPY_NO_PASS_SERVER": "1"}, tmp_path / "programs").stdout
    assert a.startswith("error ok") and a == b


def test_a_sweeps_parallel_compiles_all_land_in_the_cache(tmp_path):
    code = """
import concurrent.futures
import mkpy as mx
x = mx.arange(64, dtype=mx.float32)
mx.eval(x)  # the workers use it: evaluated here, on this thread's stream
c = mx.fast.metal_kernel(name="sweep_cache", input_names=["inp"], output_names=["out"], source='''%s''')
def first(scale):
    p, = c(inputs=[x], template=[("SCALE", scale)], grid=(64, 1, 1), threadgroup=(64, 1, 1),
           output_shapes=[(64,)], output_dtypes=[mx.float32])
    mx.eval(p)
    return p.tolist() == [float(sum(range(64))) * scale] * 64
with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    assert all(pool.map(first, range(1, 9)))
info = mx.metal.kernel_cache_info()
print(info["compiles"], info["disk_hits"])
""" % COOP
    assert _child(code, {}, tmp_path).stdout.split() == ["8", "0"]
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".so")]) == 8
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]
    # the next process finds every variant on disk
    assert _child(code, {}, tmp_path).stdout.split() == ["0", "8"]


def test_a_sweeps_failed_variant_raises_at_its_eval_and_is_never_lost(tmp_path):
    """One variant of a parallel sweep does not compile: its worker's eval raises the compiler's
    message, the other variants compile and land in the cache, the failed one is not cached (a
    second eval raises again), and a lazy graph over it raises at the eval that needs it.
    (An array built on a worker's stream is not evaluated on another thread: MLX raises "There is
    no Stream(gpu, N) in current thread." there, and so does mkpy.)"""
    code = """
import concurrent.futures
import mkpy as mx
x = mx.arange(64, dtype=mx.float32)
mx.eval(x)
c = mx.fast.metal_kernel(name="sweep_fail", input_names=["inp"], output_names=["out"], source='''
    static_assert(SCALE != 3, "SCALE 3 is refused");
%s''')
def call(scale):
    p, = c(inputs=[x], template=[("SCALE", scale)], grid=(64, 1, 1), threadgroup=(64, 1, 1),
           output_shapes=[(64,)], output_dtypes=[mx.float32])
    return p
def first(scale):
    p = call(scale)
    try:
        mx.eval(p)
    except RuntimeError as e:
        return "raised" if "SCALE 3 is refused" in str(e) else "other: %%s" %% e
    return "ok" if p.tolist() == [float(sum(range(64))) * scale] * 64 else "wrong"
with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    print(" ".join(pool.map(first, range(1, 7))))
print(first(3))
good, bad = call(2), call(3)  # lazy: the failure surfaces at the eval that needs it
try:
    mx.eval(mx.sum(good) + mx.sum(bad))
    print("no error")
except RuntimeError as e:
    print("main raised" if "SCALE 3 is refused" in str(e) else "other: %%s" %% e)
print(mx.metal.kernel_cache_info()["compiles"])
""" % COOP
    lines = _child(code, {}, tmp_path).stdout.split("\n")
    assert lines[0] == "ok ok raised ok ok ok"
    assert lines[1] == "raised"
    assert lines[2] == "main raised"
    assert lines[3] == "8"  # the five good variants, and the failed one at each of its three evals: never cached
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".so")]) == 5


FAKE_CC = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int slow;
__attribute__((destructor)) static void slow_destructor(void) {
    if (slow) sleep(1); /* as libLLVM's destructors: the status must not wait for them */
}
int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "";
    printf("out %s\n", how);
    if (!strcmp(how, "env")) printf("env %s\n", getenv("MKPY_FAKE_ENV") ? getenv("MKPY_FAKE_ENV") : "(unset)");
    fflush(stdout);
    if (!strcmp(how, "exit3")) exit(3);
    if (!strcmp(how, "_exit5")) _exit(5);
    if (!strcmp(how, "kill")) raise(SIGKILL);
    slow = !strcmp(how, "slow-exit");
    return 0;
}
"""


def _zygote_ask(sock, args, env=None):
    """One request to a zygote (cc_zygote.c's protocol: folder, "argc umask", arguments,
    environment): its status and the program's output."""
    import socket
    import struct
    r, w = os.pipe()
    env = os.environ if env is None else env
    head = ["%d %d" % (len(args), 0o22)]
    strings = [os.getcwd()] + head + list(args) + ["%s=%s" % kv for kv in env.items()]
    body = b"\0".join(s.encode() for s in strings) + b"\0"
    sock.sendmsg([struct.pack("=Q", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", w))])
    sock.sendall(body)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        out += chunk
    os.close(r)
    status, = struct.unpack("=i", sock.recv(4, socket.MSG_WAITALL))
    return status, out.decode()


@pytest.mark.skipif(not HAVE_ZYGOTE, reason="no mkpy/libmkpy-cc-zygote.so (built on Linux only)")
def test_the_zygote_reports_each_way_a_compiler_ends(tmp_path):
    """The status comes back when main returns (before the child's teardown), from exit(),
    and, for a child that ends without exit() (_exit, a signal), from waitpid."""
    import shutil
    import socket
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to build the stand-in compiler")
    (tmp_path / "fake.c").write_text(FAKE_CC)
    prog = str(tmp_path / "fake")
    subprocess.run([cc, "-O1", "-o", prog, str(tmp_path / "fake.c")], check=True)
    a, b = socket.socketpair()
    env = dict(os.environ, LD_PRELOAD=os.path.join(ROOT, "mkpy", "libmkpy-cc-zygote.so"), MKPY_CC_ZYGOTE="1")
    z = subprocess.Popen([prog], stdin=b, stdout=b, env=env, close_fds=True)
    b.close()
    try:
        assert _zygote_ask(a, [prog, "ok"]) == (0, "out ok\n")
        assert _zygote_ask(a, [prog, "exit3"]) == (3, "out exit3\n")
        assert _zygote_ask(a, [prog, "_exit5"]) == (5, "out _exit5\n")
        assert _zygote_ask(a, [prog, "kill"]) == (128 + 9, "out kill\n")
        t0 = time.monotonic()
        assert _zygote_ask(a, [prog, "slow-exit"]) == (0, "out slow-exit\n")
        assert time.monotonic() - t0 < 0.9  # the destructor's sleep(1) came after the answer
        assert _zygote_ask(a, [prog, "ok"]) == (0, "out ok\n")  # and the zygote serves the next one
        # the compiler runs with the request's environment, not the zygote's
        assert _zygote_ask(a, [prog, "env"], {"MKPY_FAKE_ENV": "one"}) == (0, "out env\nenv one\n")
        assert _zygote_ask(a, [prog, "env"], {}) == (0, "out env\nenv (unset)\n")
    finally:
        a.close()
        z.wait(timeout=30)
