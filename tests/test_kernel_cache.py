"""Kernel caches: in memory within a process, on disk across processes."""
import os
import subprocess
import sys

import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import mkpy as mx
k = mx.fast.metal_kernel(name="cached", input_names=["a"], output_names=["o"],
                         source="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] * TAG;")
a = mx.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
o, = k(inputs=[a], output_shapes=[(8,)], output_dtypes=[mx.float32], grid=(8, 1, 1), threadgroup=(8, 1, 1))
assert o.tolist() == [TAG * v for v in range(1, 9)], o.tolist()
info = mx.metal.kernel_cache_info()
print(info["compiles"], info["disk_hits"], info["memory_hits"])
"""


def run(cache_dir, tag):
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", SCRIPT.replace("TAG", str(tag))], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(p):
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return [int(v) for v in out.split()]


def test_second_process_compiles_nothing(tmp_path):
    assert finish(run(tmp_path, 3)) == [1, 0, 0]
    assert finish(run(tmp_path, 3)) == [0, 1, 0]
    # another source is another entry
    assert finish(run(tmp_path, 5)) == [1, 0, 0]
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".so")]) == 2
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_concurrent_processes_compile_safely(tmp_path):
    procs = [run(tmp_path, 7) for _ in range(4)]
    for p in procs:
        compiles, disk, _ = finish(p)
        assert compiles + disk == 1
    assert finish(run(tmp_path, 7)) == [0, 1, 0]
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    assert finish(run(tmp_path, 9)) == [1, 0, 0]
    for f in os.listdir(tmp_path):
        if f.endswith(".key"):
            (tmp_path / f).write_text("not the key")
    assert finish(run(tmp_path, 9)) == [1, 0, 0]


def test_memory_cache_hits_within_a_process():
    k = mx.fast.metal_kernel(name="mem_cached", input_names=["a"], output_names=["o"],
                             source="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] + 1;")
    a = mx.array([1.0] * 8)
    args = dict(inputs=[a], output_shapes=[(8,)], output_dtypes=[mx.float32], grid=(8, 1, 1), threadgroup=(8, 1, 1))
    k(**args)[0].tolist()
    before = mx.metal.kernel_cache_info()
    for _ in range(3):
        assert k(**args)[0].tolist() == [2.0] * 8
    after = mx.metal.kernel_cache_info()
    assert after["memory_hits"] - before["memory_hits"] == 3
    assert after["compiles"] == before["compiles"] and after["disk_hits"] == before["disk_hits"]


def test_translated_cpp_is_kept_beside_the_object(tmp_path):
    p = run(tmp_path, 11)
    finish(p)
    cpps = [f for f in os.listdir(tmp_path) if f.endswith(".cpp")]
    assert len(cpps) == 1
    text = open(os.path.join(tmp_path, cpps[0])).read()
    assert '#line 1 "<kernel cached source>"' in text and "a[thread_position_in_grid.x] * 11" in text
    assert os.path.exists(os.path.join(tmp_path, cpps[0][:-4] + ".so"))


def test_precompile_runtime_is_idempotent():
    msg = mx.metal.precompile_runtime()
    assert "precompiled runtime header(s) built in" in msg
    again = mx.metal.precompile_runtime()
    assert again.startswith("0 precompiled runtime header(s)")
    pch_dir = os.path.join(ROOT, "mkpy", "include", "pch")
    assert len([f for f in os.listdir(pch_dir) if f.endswith(".pch")]) >= 3


# ----------------------------------------------------------------------------- lifetime and bounds
# Each case runs in a fresh process with its own environment and cache folder.

HELPERS = """
import os, sys, threading, time
import mkpy as mx

A = mx.array([1.0, 2.0, 3.0, 4.0])

def kern(i, body="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] + %d;"):
    return mx.fast.metal_kernel(name="k%d" % i, input_names=["a"], output_names=["o"], source=body % i)

def call(k, i):
    o, = k(inputs=[A], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=(4, 1, 1), threadgroup=(4, 1, 1))
    assert o.tolist() == [v + i for v in (1.0, 2.0, 3.0, 4.0)], (i, o.tolist())

def run_all(ids, nthreads=2):
    # compiles of different kernels run in parallel
    errs = []
    def work(part):
        try:
            for i in part:
                call(kern(i), i)
        except BaseException as e:
            errs.append(e)
    ts = [threading.Thread(target=work, args=(ids[t::nthreads],)) for t in range(nthreads)]
    for t in ts: t.start()
    for t in ts: t.join()
    if errs: raise errs[0]

def info():
    return mx.metal.kernel_cache_info()

def mapped_kernels():
    d = info()["dir"]
    with open("/proc/self/maps") as f:
        return len({line.split()[-1] for line in f if d in line and line.rstrip().endswith(".so")})
"""


def as_nobody():
    os.setgid(65534)
    os.setuid(65534)


def run_script(body, env_extra, timeout=300, preexec_fn=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MKPY_CACHE_DIR", "MKPY_MAX_LOADED_KERNELS",
                                                           "MKPY_CACHE_MAX_BYTES", "MKPY_CXX")}
    env["PYTHONPATH"] = ROOT
    for k, v in env_extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    p = subprocess.run([sys.executable, "-c", HELPERS + body], capture_output=True, text=True, env=env,
                       timeout=timeout, preexec_fn=preexec_fn, cwd="/")
    assert p.returncode == 0, p.stderr
    return p


def test_loaded_kernels_are_bounded_and_reload_without_compiling(tmp_path):
    p = run_script("""
run_all(list(range(200)))
i = info()
assert i["compiles"] == 200 and i["entries"] == 200, i
assert i["loaded"] <= 32, i
assert mapped_kernels() <= 32, mapped_kernels()
call(kern(0), 0)  # unloaded long ago: loaded again from disk
j = info()
assert j["compiles"] == 200 and j["disk_hits"] == i["disk_hits"] + 1, (i, j)
assert j["loaded"] <= 32 and mapped_kernels() <= 32
call(kern(0), 0)
assert info()["memory_hits"] == j["memory_hits"] + 1
print("ok")
""", {"MKPY_CACHE_DIR": tmp_path, "MKPY_MAX_LOADED_KERNELS": 32}, timeout=600)
    assert p.stdout.strip() == "ok"


def test_kernel_in_use_is_never_unloaded_and_evicted_entry_is_rebuilt(tmp_path):
    # one kernel loaded at a time: a long launch of A keeps A loaded while B loads;
    # A's disk entry removed behind our back is rebuilt, never a failure
    p = run_script("""
slow = mx.fast.metal_kernel(name="slow", input_names=["a", "n"], output_names=["o"], source='''
    float acc = 0.0f;
    for (uint i = 0; i < n[0]; i++) acc = acc * 0.5f + a[thread_position_in_grid.x];
    o[thread_position_in_grid.x] = acc;''')
def run_slow(n):
    o, = slow(inputs=[A, mx.array([n], dtype=mx.uint32)], output_shapes=[(4,)], output_dtypes=[mx.float32],
              grid=(4, 1, 1), threadgroup=(1, 1, 1))
    assert abs(o.tolist()[3] - 8.0) < 1e-3, o.tolist()
run_slow(100)
call(kern(1), 1)
assert info()["loaded"] == 1
t = threading.Thread(target=run_slow, args=(300_000_000,))
t.start()
time.sleep(0.3)
call(kern(2), 2)   # loads while `slow` runs: `slow` must stay loaded until its launch ends
assert t.is_alive(), "the slow launch ended too soon to overlap"
t.join()
assert info()["loaded"] == 1
c0 = info()["compiles"]
d = info()["dir"]
for f in os.listdir(d):
    if f.endswith((".so", ".key")):
        os.unlink(os.path.join(d, f))   # as another process's eviction would
call(kern(1), 1)
assert info()["compiles"] == c0 + 1
import shutil
shutil.rmtree(d)            # the whole folder removed while the process runs: made again, private
call(kern(3), 3)
assert os.stat(d).st_mode & 0o777 == 0o700 and info()["compiles"] == c0 + 2
print("ok")
""", {"MKPY_CACHE_DIR": tmp_path, "MKPY_MAX_LOADED_KERNELS": 1})
    assert p.stdout.strip() == "ok"


def test_disk_cache_is_capped(tmp_path):
    p = run_script("""
d = os.environ["MKPY_CACHE_DIR"]
def size():
    return sum(e.stat().st_size for e in os.scandir(d) if not e.name.startswith("pch-"))
peak = 0
for i in range(80):
    call(kern(i), i)
    peak = max(peak, size())
assert peak <= 400_000, peak
assert info()["bytes"] <= 400_000
import re
kept = sorted(int(re.search(r"\\+ (\\d+);", open(os.path.join(d, f)).read()).group(1))
              for f in os.listdir(d) if f.endswith(".cpp"))
assert 5 <= len(kept) < 80, kept
assert kept == list(range(80 - len(kept), 80)), kept   # least recently used went first
print(info()["compiles"])
""", {"MKPY_CACHE_DIR": tmp_path, "MKPY_CACHE_MAX_BYTES": 400000})
    assert p.stdout.strip() == "80"


SLOW_CXX = """#!/bin/sh
# a compiler that takes 2 s more while the flag file exists, logging when it starts and ends
if [ -e "{flag}" ]; then echo "start $$" >> "{log}"; sleep 2; fi
"{cxx}" "$@"
rc=$?
if [ -e "{flag}" ]; then echo "end $$" >> "{log}"; fi
exit $rc
"""


def test_compiles_never_block_cached_kernels_and_run_in_parallel(tmp_path):
    import shutil
    # the compiler mkpy itself would take (clang++-16 alone on Ubuntu 24.04, say)
    cxx = os.environ.get("MKPY_CXX") or next(
        filter(None, (shutil.which(f"clang++-{v}") for v in range(25, 14, -1))), None) or shutil.which("clang++")
    assert cxx, "no clang++ 15 or newer"
    flag, log = tmp_path / "slow", tmp_path / "log"
    wrapper = tmp_path / "slow-clang++"
    wrapper.write_text(SLOW_CXX.format(flag=flag, log=log, cxx=cxx))
    wrapper.chmod(0o755)
    p = run_script("""
flag, log = sys.argv[0], None
flag = os.environ["SLOW_FLAG"]; log = os.environ["SLOW_LOG"]
k1 = kern(1)
call(k1, 1)                      # compiled and cached (the compiler is fast for now)
open(flag, "w").close()          # from here on every compile takes 2 s more
t = threading.Thread(target=call, args=(kern(2), 2))
t.start()
while not os.path.exists(log): time.sleep(0.01)
t0 = time.perf_counter()
for _ in range(100):
    call(k1, 1)
dt = time.perf_counter() - t0
busy = t.is_alive()
t.join()
assert busy, "the compile ended before the cached calls did"
assert dt < 1.0, dt  # a call that waited for the compile would take 2 s; the margin is for a loaded machine
# two different new kernels compile at once; the same new kernel from two threads compiles once
os.unlink(log)
c0 = info()["compiles"]
ts = [threading.Thread(target=call, args=(kern(i), i)) for i in (3, 4)]
for t in ts: t.start()
for t in ts: t.join()
events = [l.split()[0] for l in open(log)]
assert events[:2] == ["start", "start"], events
os.unlink(log)
ts = [threading.Thread(target=call, args=(kern(5), 5)) for _ in range(3)]
for t in ts: t.start()
for t in ts: t.join()
assert [l.split()[0] for l in open(log)] == ["start", "end"]
assert info()["compiles"] == c0 + 3, info()
print("ok %.3f" % dt)
""", {"MKPY_CACHE_DIR": tmp_path / "cache", "MKPY_CXX": wrapper, "MKPY_NO_PCH": 1, "SLOW_FLAG": flag,
      "SLOW_LOG": log})
    assert p.stdout.startswith("ok")


# ----------------------------------------------------------------------------- the folder is yours

WHERE = """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    d = info()["dir"]
    RUN
print(d)
print(len([x for x in w if issubclass(x.category, RuntimeWarning) and "kernel cache folder" in str(x.message)]))
print(os.stat(d).st_mode & 0o777)
print(" | ".join(str(x.message) for x in w).replace(chr(10), " "))
"""


def where(env, run_kernel=False, preexec_fn=None):
    p = run_script(WHERE.replace("RUN", "call(kern(7), 7); call(kern(8), 8)" if run_kernel else "pass"), env,
                   preexec_fn=preexec_fn)
    d, warned, mode, message = (p.stdout.split("\n", 3) + [""])[:4]
    where.message = message
    return d, int(warned), int(mode)


def test_home_unset_uses_the_password_database(tmp_path):
    import pwd
    home = pwd.getpwuid(os.geteuid()).pw_dir
    d, warned, mode = where({"HOME": None, "XDG_CACHE_HOME": None, "MKPY_CACHE_DIR": None})
    assert d == os.path.join(home, ".cache", "mkpy") and not d.startswith("/tmp/")
    assert warned == 0


def test_xdg_cache_home_and_private_mode(tmp_path):
    d, warned, mode = where({"HOME": None, "XDG_CACHE_HOME": tmp_path / "x" / "y", "MKPY_CACHE_DIR": None},
                            run_kernel=True)
    assert d == str(tmp_path / "x" / "y" / "mkpy") and warned == 0
    for level in (tmp_path / "x", tmp_path / "x" / "y", tmp_path / "x" / "y" / "mkpy"):
        assert os.stat(level).st_mode & 0o777 == 0o700, level  # every missing level made private
    assert len([f for f in os.listdir(d) if f.endswith(".so")]) == 2
    # MKPY_CACHE_DIR wins over XDG_CACHE_HOME
    d2, _, _ = where({"HOME": None, "XDG_CACHE_HOME": tmp_path / "x" / "y", "MKPY_CACHE_DIR": tmp_path / "m"})
    assert d2 == str(tmp_path / "m")


def test_planted_cache_folder_is_not_used(tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o755)
    os.chown(planted, 65534, 65534)  # another user's (nobody's) folder
    d, warned, mode = where({"MKPY_CACHE_DIR": planted}, run_kernel=True)
    assert d != str(planted) and warned == 1 and mode == 0o700
    assert "is owned by another user" in where.message, where.message
    assert os.listdir(planted) == []
    assert not os.path.exists(d)  # the private folder goes with the process


def test_group_writable_symlinked_or_uncreatable_folder_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    for bad, why in ((shared, "can be written by other users"), (tmp_path / "link", "is a symbolic link"),
                     ("/proc/version/mkpy", "cannot be created")):
        d, warned, mode = where({"MKPY_CACHE_DIR": bad})
        assert d != str(bad) and warned == 1 and mode == 0o700, bad
        assert why in where.message, where.message
    assert os.listdir(shared) == [] and os.listdir(target) == []


def nobody_can_import_mkpy():
    """Whether `nobody` can read this checkout (a checkout under a 0700 folder cannot run as nobody)."""
    if os.geteuid() != 0:
        return False
    probe = ("import os, sys; r = sys.argv[1]; "
             "sys.exit(0 if all(os.access(p, os.R_OK) for p in (r + '/mkpy/__init__.py', r + '/mkpy')) "
             "and any(f.startswith('_core') and os.access(r + '/mkpy/' + f, os.R_OK) for f in os.listdir(r + '/mkpy')) "
             "else 1)")
    try:
        return subprocess.run([sys.executable, "-c", probe, ROOT], preexec_fn=as_nobody, cwd="/",
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_read_only_folder_falls_back_with_one_warning(tmp_path):
    # root may write anywhere: the process runs as `nobody`, whose own cache folder is read-only
    import shutil
    import tempfile
    if not nobody_can_import_mkpy():
        pytest.skip("the checkout %s cannot be read by `nobody` (a parent folder is private), so mkpy cannot "
                    "be imported as that user" % ROOT)
    base = tempfile.mkdtemp()
    try:
        os.chmod(base, 0o755)
        ro = os.path.join(base, "ro")
        os.mkdir(ro)
        os.chown(ro, 65534, 65534)
        os.chmod(ro, 0o500)
        d, warned, mode = where({"MKPY_CACHE_DIR": ro, "HOME": None}, run_kernel=True, preexec_fn=as_nobody)
        assert d != ro and warned == 1 and mode == 0o700
        assert "is not writable" in where.message, where.message
        assert os.listdir(ro) == []
    finally:
        shutil.rmtree(base)


# ----------------------------------------------------------------------------- entries bound to their code

def entry_of(cache_dir, tag):
    for f in os.listdir(cache_dir):
        if f.endswith(".cpp") and "* %d;" % tag in open(os.path.join(cache_dir, f)).read():
            return os.path.join(cache_dir, f[:-4] + ".so")
    raise AssertionError("no entry for %d" % tag)


def test_swapped_truncated_or_corrupted_object_is_rebuilt(tmp_path):
    assert finish(run(tmp_path, 3)) == [1, 0, 0]
    assert finish(run(tmp_path, 5)) == [1, 0, 0]
    a, b = entry_of(tmp_path, 3), entry_of(tmp_path, 5)
    # kernel 5's object over kernel 3's entry (key file intact): 3 still computes 3's result
    with open(b, "rb") as src, open(a, "wb") as dst:
        dst.write(src.read())
    assert finish(run(tmp_path, 3)) == [1, 0, 0]
    assert finish(run(tmp_path, 3)) == [0, 1, 0]  # the rebuilt entry is good
    # truncated
    os.truncate(a, os.path.getsize(a) // 2)
    assert finish(run(tmp_path, 3)) == [1, 0, 0]
    # one byte changed, same size
    data = bytearray(open(a, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(a, "wb").write(bytes(data))
    assert finish(run(tmp_path, 3)) == [1, 0, 0]
    assert finish(run(tmp_path, 3)) == [0, 1, 0]


def test_four_processes_racing_compile_once(tmp_path):
    procs = [run(tmp_path, 13) for _ in range(4)]
    counts = [finish(p) for p in procs]
    assert sum(c[0] for c in counts) == 1 and sum(c[1] for c in counts) == 3, counts
    sos = [f for f in os.listdir(tmp_path) if f.endswith(".so")]
    assert len(sos) == 1 and not [f for f in os.listdir(tmp_path) if ".tmp." in f]
    assert finish(run(tmp_path, 13)) == [0, 1, 0]


def test_kernel_cache_info_reports_dir_bytes_loaded():
    k = mx.fast.metal_kernel(name="info_k", input_names=["a"], output_names=["o"],
                             source="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] * 3;")
    o, = k(inputs=[mx.array([1.0])], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
           threadgroup=(1, 1, 1))
    assert o.tolist() == [3.0]
    info = mx.metal.kernel_cache_info()
    assert info["dir"] == os.environ["MKPY_CACHE_DIR"]
    files = [f for f in os.listdir(info["dir"]) if f[:32].isalnum() and len(f.split(".")[0]) == 32]
    assert info["bytes"] == sum(os.path.getsize(os.path.join(info["dir"], f)) for f in files) > 0
    assert 1 <= info["loaded"] <= info["entries"]


def test_cache_command_and_clear(tmp_path):
    finish(run(tmp_path, 17))
    finish(run(tmp_path, 17))
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "mkpy", "cache"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert "location: %s" % tmp_path in out and "entries:  1" in out, out
    assert "hit rate: 50.0% (1 hits, 1 compiles)" in out, out
    size = int(out.split("size:")[1].split()[0].split(".")[0])
    assert size > 0
    out = subprocess.run([sys.executable, "-m", "mkpy", "cache", "--clear"], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert "entries:  0" in out and "size:     0 bytes" in out, out
    assert not [f for f in os.listdir(tmp_path) if f.endswith((".so", ".key"))]
    assert finish(run(tmp_path, 17)) == [1, 0, 0]


def test_clear_kernel_cache_unloads_and_next_call_loads_from_disk():
    k = mx.fast.metal_kernel(name="clear_k", input_names=["a"], output_names=["o"],
                             source="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] * 5;")
    args = dict(inputs=[mx.array([2.0])], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
                threadgroup=(1, 1, 1))
    assert k(**args)[0].tolist() == [10.0]
    assert mx.metal.kernel_cache_info()["loaded"] >= 1
    mx.metal.clear_kernel_cache()
    before = mx.metal.kernel_cache_info()
    assert before["loaded"] == 0 and before["entries"] == 0
    assert k(**args)[0].tolist() == [10.0]
    after = mx.metal.kernel_cache_info()
    assert after["disk_hits"] == before["disk_hits"] + 1 and after["compiles"] == before["compiles"]
    assert after["loaded"] == 1
