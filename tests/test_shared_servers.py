"""Compile servers shared across processes (csrc/backend/cpu/srvd.c, issue #27): a later process
reuses the daemon an earlier one started, the compiler sees the requesting process's
environment, a stale socket and a killed daemon are recovered, an unsafe folder is refused, the
idle time ends a daemon, and the bits are those of compilers run as programs.

The suite runs with MKPY_NO_SHARED_SERVER=1 (tests/conftest.py); these tests turn the daemons on
in their own processes, each with a rendezvous folder of its own (MKPY_SERVER_DIR) and a short idle
time, and stop every daemon they start: removing a daemon's socket file ends it within a second."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_PASS = os.path.exists(os.path.join(ROOT, "mkpy", "mkpy-cbs-pass"))
HAVE_ZYGOTE = os.path.exists(os.path.join(ROOT, "mkpy", "libmkpy-cc-zygote.so"))
pytestmark = pytest.mark.skipif(not (HAVE_PASS and HAVE_ZYGOTE),
                                reason="needs mkpy/mkpy-cbs-pass (LLVM) and mkpy/libmkpy-cc-zygote.so (Linux)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_kernel_latency import BITS_SCRIPT, COOP, _running  # noqa: E402

DAEMON = re.compile(r"(compiler \(clang zygote\)|lockstep pass): shared daemon pid (\d+)")
STARTED = "the daemon was started by this process"


@pytest.fixture
def rendezvous(tmp_path):
    """A private rendezvous folder; at the end, every daemon seen is stopped (its socket removed)
    and must be gone."""
    d = tmp_path / "servers"
    d.mkdir(mode=0o700)
    seen = set()
    yield d, seen
    for f in os.listdir(d):
        if f.endswith(".sock"):
            os.unlink(d / f)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(p) for p in seen):
        time.sleep(0.1)
    assert not [p for p in seen if _running(p)], "a daemon is still running"


def _run(code, folder, seen, cache, **env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_CACHE_DIR=str(cache), MKPY_SERVER_DIR=str(folder),
               MKPY_SERVER_IDLE="60", MKPY_DEBUG="1")
    env.pop("MKPY_NO_SHARED_SERVER", None)
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    daemons = {kind: int(pid) for kind, pid in DAEMON.findall(p.stderr)}
    seen.update(daemons.values())
    return p, daemons


KERNELS = BITS_SCRIPT.replace("COOP_SRC", repr(COOP))


def test_a_later_process_reuses_the_daemons_with_the_same_bits(rendezvous, tmp_path):
    folder, seen = rendezvous
    a, first = _run(KERNELS, folder, seen, tmp_path / "a")
    assert a.returncode == 0, a.stderr
    assert set(first) == {"compiler (clang zygote)", "lockstep pass"}, a.stderr
    assert a.stderr.count(STARTED) == 2, a.stderr
    assert (os.stat(folder).st_mode & 0o777) == 0o700
    b, second = _run(KERNELS, folder, seen, tmp_path / "b")
    assert b.returncode == 0, b.stderr
    assert second == first and STARTED not in b.stderr, b.stderr
    # compilers run as programs give the same bits and the same error
    c, none = _run(KERNELS, folder, seen, tmp_path / "c", MKPY_NO_CC_SERVER="1", MKPY_NO_PASS_SERVER="1")
    assert c.returncode == 0 and not none, c.stderr
    assert a.stdout.startswith("error ok") and a.stdout == b.stdout == c.stdout


HEADER_KERNEL = """
import mkpy as mx
x = mx.arange(4, dtype=mx.float32)
k = mx.fast.metal_kernel(name="cpath", input_names=["inp"], output_names=["out"],
                         header='#include "mkpy_cpath_test.h"\\n',
                         source="out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] + MKPY_CPATH_VALUE;")
o, = k(inputs=[x], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])
try:
    print(o.tolist())
except RuntimeError as e:
    print("error:", "mkpy_cpath_test.h" in str(e))
"""


def test_the_compiler_sees_the_requesting_process_environment(rendezvous, tmp_path):
    folder, seen = rendezvous
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "mkpy_cpath_test.h").write_text("#define MKPY_CPATH_VALUE 7.0f\n")
    env = {"MKPY_ALLOW_NON_METAL": "1", "CPATH": ""}
    a, first = _run(HEADER_KERNEL, folder, seen, tmp_path / "a", **env)  # starts the daemon, no CPATH
    assert a.stdout.strip() == "error: True", a.stdout + a.stderr
    env["CPATH"] = str(inc)
    b, second = _run(HEADER_KERNEL, folder, seen, tmp_path / "b", **env)  # the same daemon, with CPATH
    assert b.stdout.strip() == "[7.0, 8.0, 9.0, 10.0]", b.stdout + b.stderr
    assert second["compiler (clang zygote)"] == first["compiler (clang zygote)"]


PLAIN = """
import mkpy as mx
x = mx.arange(8, dtype=mx.float32)
k = mx.fast.metal_kernel(name="plain_shared", input_names=["inp"], output_names=["out"],
                         source="out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] * 3.0f;")
o, = k(inputs=[x], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)], output_dtypes=[mx.float32])
print(o.tolist())
"""
PLAIN_OUT = str([3.0 * v for v in range(8)])


def _cc(folder, seen, cache, **env):
    p, d = _run(PLAIN, folder, seen, cache, **env)
    assert p.returncode == 0 and p.stdout.strip() == PLAIN_OUT, p.stderr
    return p, d.get("compiler (clang zygote)")


def test_a_killed_daemon_and_a_stale_socket_are_recovered(rendezvous, tmp_path):
    import socket
    folder, seen = rendezvous
    _, first = _cc(folder, seen, tmp_path / "a")
    assert first
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _running(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    socks = [f for f in os.listdir(folder) if f.endswith(".sock")]
    assert len(socks) == 1  # left behind by the killed daemon: nobody listens on it
    p, second = _cc(folder, seen, tmp_path / "b")
    assert second and second != first and STARTED in p.stderr, p.stderr
    # a socket file bound by a process that never listened (or has gone)
    os.unlink(folder / socks[0])
    deadline = time.monotonic() + 30
    while _running(second) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(second)  # its socket file gone, the daemon ended
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(folder / socks[0]))
    s.close()
    p, third = _cc(folder, seen, tmp_path / "c")
    assert third and third not in (first, second) and STARTED in p.stderr, p.stderr


def test_an_unsafe_folder_is_refused(rendezvous, tmp_path):
    _, seen = rendezvous
    for mode in (0o755, 0o1777):
        d = tmp_path / ("open%o" % mode)
        d.mkdir()
        os.chmod(d, mode)
        p, d_pid = _cc(d, seen, tmp_path / ("c%o" % mode))
        assert d_pid is None and "a server of this process" in p.stderr, p.stderr
        assert not os.listdir(d)
    link = tmp_path / "link"
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, link)
    p, d_pid = _cc(link, seen, tmp_path / "clink")
    assert d_pid is None and "a server of this process" in p.stderr, p.stderr


def test_the_idle_time_ends_a_daemon(rendezvous, tmp_path):
    folder, seen = rendezvous
    _, pid = _cc(folder, seen, tmp_path / "a", MKPY_SERVER_IDLE="1")
    assert pid
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)
    assert not [f for f in os.listdir(folder) if f.endswith(".sock")]  # it removed its socket


def test_off_switch(rendezvous, tmp_path):
    folder, seen = rendezvous
    p, pid = _cc(folder, seen, tmp_path / "a", MKPY_NO_SHARED_SERVER="1")
    assert pid is None and "a server of this process" in p.stderr, p.stderr
    assert not os.listdir(folder)
