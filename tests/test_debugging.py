"""Debugging aids (issue #12, docs/debugging.md): printing from kernels, debug builds and gdb,
`python -m mkpy`, MKPY_DEBUG, the profiler's trace, arrays in pytest's messages and
mkpy.testing.assert_allclose."""
import glob
import json
import os
import reprlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import mkpy as mx
from mkpy.testing import assert_allclose

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_py(code, env_extra=None, timeout=240):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.update({k: str(v) for k, v in (env_extra or {}).items()})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def run1(kernel, inputs, grid, tg, shapes, dtypes=None, **kw):
    outs = kernel(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes,
                  output_dtypes=dtypes or [mx.float32] * len(shapes), **kw)
    mx.eval(*outs)
    return outs


# ------------------------------------------------------------------ printing

LOG_SOURCE = """
    uint i = thread_position_in_grid.x;
    os_log_default.log("thread %u of group %u: x = %.2f", i, threadgroup_position_in_grid.x, x[i]);
    out[i] = x[i];
"""


def test_os_log_prints_on_sys_stdout_by_group_then_thread(capsys):
    k = mx.fast.metal_kernel(name="dbg_log", input_names=["x"], output_names=["out"], source=LOG_SOURCE)
    x = mx.arange(8).astype(mx.float32) / 2
    (out,) = run1(k, [x], (8, 1, 1), (4, 1, 1), [(8,)])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["thread %d of group %d: x = %.2f" % (i, i // 4, i / 2) for i in range(8)]
    assert out.tolist() == x.tolist()


def test_os_log_named_logger_and_half_arguments(capsys):
    k = mx.fast.metal_kernel(
        name="dbg_logger", input_names=["x"], output_names=["out"],
        header='constant os_log logger("com.example", "kernels");\n',
        source="""
            uint i = thread_position_in_grid.x;
            logger.log_info("h=%g", x[i]);
            out[i] = x[i];
        """)
    run1(k, [mx.array([1.5, -2.25], dtype=mx.float16)], (2, 1, 1), (2, 1, 1), [(2,)], [mx.float16])
    assert capsys.readouterr().out.splitlines() == ["h=1.5", "h=-2.25"]


def test_printf_is_refused_as_on_a_mac_unless_allow_non_metal(capsys):
    src = 'uint i = thread_position_in_grid.x;\nprintf("i=%u\\n", i);\nout[i] = 1.0f;'
    k = mx.fast.metal_kernel(name="dbg_printf", input_names=["x"], output_names=["out"], source=src)
    with pytest.raises(RuntimeError, match="printf"):
        run1(k, [mx.zeros((3,))], (3, 1, 1), (3, 1, 1), [(3,)])
    k2 = mx.fast.metal_kernel(name="dbg_printf2", input_names=["x"], output_names=["out"], source=src,
                              compile_options={"allow_non_metal": True})
    capsys.readouterr()
    run1(k2, [mx.zeros((3,))], (3, 1, 1), (3, 1, 1), [(3,)])
    assert capsys.readouterr().out == "i=0\ni=1\ni=2\n"


def test_printing_in_a_cooperative_kernel_is_ordered_by_group_then_thread(capsys):
    # thread t prints after the barrier what its neighbour wrote before it
    src = """
        threadgroup float buf[8];
        uint t = thread_position_in_threadgroup.x;
        uint g = threadgroup_position_in_grid.x;
        buf[t] = x[thread_position_in_grid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = buf[(t + 1) % 8];
        os_log_default.log("g%u t%u %.0f", g, t, v);
        out[thread_position_in_grid.x] = v;
    """
    k = mx.fast.metal_kernel(name="dbg_coop_log", input_names=["x"], output_names=["out"], source=src)
    x = mx.arange(16).astype(mx.float32)
    run1(k, [x], (16, 1, 1), (8, 1, 1), [(16,)])
    want = ["g%d t%d %d" % (g, t, g * 8 + (t + 1) % 8) for g in range(2) for t in range(8)]
    assert capsys.readouterr().out.splitlines() == want


def test_printing_is_capped_with_a_note(capsys, monkeypatch):
    monkeypatch.setenv("MKPY_KERNEL_PRINT_LIMIT", "5")
    k = mx.fast.metal_kernel(name="dbg_cap", input_names=["x"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        os_log_default.log("a %u", i);
        os_log_default.log("b %u", i);
        out[i] = 0;
    """)
    run1(k, [mx.zeros((64,))], (64, 1, 1), (32, 1, 1), [(64,)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == ["a 0", "b 0", "a 1", "b 1", "a 2"]
    assert "printed 128 messages" in lines[5] and "123 more" in lines[5] and "MKPY_KERNEL_PRINT_LIMIT" in lines[5]
    assert len(lines) == 6


# --------------------------------------------------------- debug builds, gdb

GDB_KERNEL = """\
import mkpy as mx
k = mx.fast.metal_kernel(name="gdb_saxpy", input_names=["x", "y"], output_names=["out"], source='''
    uint i = thread_position_in_grid.x;
    float scaled = 2.0f * x[i];
    out[i] = scaled + y[i];
''')
(out,) = k(inputs=[mx.arange(4).astype(mx.float32), mx.ones((4,))], grid=(4, 1, 1), threadgroup=(4, 1, 1),
           output_shapes=[(4,)], output_dtypes=[mx.float32])
print("result", out.tolist())
"""


def debug_dirs(cache, name):
    return glob.glob(os.path.join(cache, "debug", name + "*-*"))


def test_debug_build_names_the_users_file_and_lines(tmp_path):
    r = run_py(GDB_KERNEL, {"MKPY_KERNEL_DEBUG": 1, "MKPY_CACHE_DIR": tmp_path})
    assert r.returncode == 0, r.stderr
    assert "result [1.0, 3.0, 5.0, 7.0]" in r.stdout
    (d,) = debug_dirs(str(tmp_path), "custom_kernel_gdb_saxpy")
    for f in ("source.metal", "header.metal", "kernel.metal", "kernel.cpp", "kernel.so"):
        assert os.path.exists(os.path.join(d, f)), f
    with open(os.path.join(d, "source.metal")) as f:
        assert f.read().splitlines()[2].strip() == "float scaled = 2.0f * x[i];"
    dwarfdump = shutil.which("llvm-dwarfdump-15") or shutil.which("llvm-dwarfdump")
    if not dwarfdump:
        pytest.skip("llvm-dwarfdump is not installed")
    lines = subprocess.run([dwarfdump, "--debug-line", os.path.join(d, "kernel.so")], capture_output=True,
                           text=True).stdout
    assert os.path.join(d, "source.metal") in lines or "source.metal" in lines
    # the rows of the line table that belong to source.metal cover its lines 2-4
    names = {}
    rows = set()
    for ln in lines.splitlines():
        s = ln.strip()
        if s.startswith("file_names["):
            idx = int(s[len("file_names["):s.index("]")])
            cur = idx
        elif s.startswith("name:") and "cur" in dir():
            names[cur] = s.split('"')[1]
        elif s[:2] == "0x" and len(s.split()) > 3:
            parts = s.split()
            try:
                line, file_idx = int(parts[1]), int(parts[3])
            except ValueError:
                continue
            if names.get(file_idx, "").endswith("source.metal"):
                rows.add(line)
    assert {2, 3, 4} <= rows, sorted(rows)
    # a normal build of the same kernel is another cache entry (the switch is part of the key)
    r2 = run_py(GDB_KERNEL + "print('info', mx.metal.kernel_cache_info()['compiles'])\n",
                {"MKPY_CACHE_DIR": tmp_path})
    assert r2.returncode == 0 and "info 1" in r2.stdout, r2.stdout + r2.stderr


def test_debug_switch_is_part_of_the_cache_key():
    k = mx.fast.metal_kernel(name="dbg_switch", input_names=["x"], output_names=["out"],
                             source="out[thread_position_in_grid.x] = x[thread_position_in_grid.x] * 3;")

    def run_and_count():
        before = mx.metal.kernel_cache_info()
        (o,) = run1(k, [mx.ones((4,))], (4, 1, 1), (4, 1, 1), [(4,)])
        after = mx.metal.kernel_cache_info()
        assert o.tolist() == [3.0] * 4
        return after["memory_hits"] - before["memory_hits"]

    assert run_and_count() == 0  # first normal build
    try:
        mx.metal.set_kernel_debug(True)
        assert run_and_count() == 0  # a debug build: not the normal one from memory
        assert run_and_count() == 1
        (d,) = debug_dirs(os.environ["MKPY_CACHE_DIR"], "custom_kernel_dbg_switch")
        assert os.path.exists(os.path.join(d, "kernel.so"))
    finally:
        mx.metal.set_kernel_debug(None)
    assert run_and_count() == 1  # the normal build again


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
def test_gdb_breaks_at_a_kernel_line_and_prints_a_threads_variables(tmp_path):
    """The session of docs/debugging.md, in batch mode."""
    script = tmp_path / "saxpy.py"
    script.write_text(GDB_KERNEL)
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_KERNEL_DEBUG="1", MKPY_NUM_THREADS="1",
               MKPY_CACHE_DIR=str(tmp_path / "cache"))
    cmd = ["gdb", "-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set auto-load off",
           "-ex", "set breakpoint pending on", "-ex", "break source.metal:4", "-ex", "run",
           "-ex", "print i", "-ex", "print scaled", "-ex", "list", "-ex", "continue", "-ex", "print i",
           "-ex", "print scaled", "-ex", "print thread_position_in_grid.x", "-ex", "kill", "--args", sys.executable, str(script)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert "Breakpoint 1, " in out and "source.metal:4" in out, out + r.stderr
    assert "$1 = 0" in out and "$2 = 0" in out, out
    assert "$3 = 1" in out and "$4 = 2" in out and "$5 = 1" in out, out
    assert "3\t    float scaled = 2.0f * x[i];" in out  # `list` shows the user's Metal source


# ------------------------------------------------------ python -m mkpy check

def test_environment_check_prints_a_line_per_item():
    r = subprocess.run([sys.executable, "-m", "mkpy"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    lines = r.stdout.splitlines()
    items = {ln[6:26].strip(): ln[:4] for ln in lines if ln[:4] in ("PASS", "FAIL", "WARN")}
    for item in ("Python", "kernel compiler", "precompiled header", "OpenBLAS", "CPU features", "kernel cache",
                 "thread pool", "cooperative engine"):
        assert item in items, r.stdout
    assert items["Python"] == "PASS" and items["kernel compiler"] == "PASS" and items["kernel cache"] == "PASS"
    fails = [ln for ln in lines if ln.startswith("FAIL")]
    assert r.returncode == (1 if fails else 0)
    for i, ln in enumerate(lines):
        if ln.startswith("FAIL"):
            assert "fix:" in lines[i + 1]


def test_environment_check_reports_a_missing_compiler_with_its_fix(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkpy", "check"],
                       env=dict(os.environ, PYTHONPATH=ROOT, MKPY_CXX=str(tmp_path / "no-such-clang"),
                                MKPY_NUM_THREADS="2"),
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    (i,) = [n for n, ln in enumerate(lines) if ln.startswith("FAIL  kernel compiler")]
    assert "no-such-clang" in lines[i] and "fix:" in lines[i + 1] and "clang" in lines[i + 1]
    assert any(ln.startswith("PASS  thread pool") and "2 threads" in ln and "MKPY_NUM_THREADS=2" in ln
               for ln in lines)


def test_cache_subcommand_still_works(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkpy", "cache"],
                       env=dict(os.environ, PYTHONPATH=ROOT, MKPY_CACHE_DIR=str(tmp_path)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "location: %s" % tmp_path in r.stdout


# --------------------------------------------------------------- MKPY_DEBUG

DEBUG_SCRIPT = """
import mkpy as mx
k = mx.fast.metal_kernel(name="dbg_levels", input_names=["x"], output_names=["out"],
                         source="out[thread_position_in_grid.x] = x[thread_position_in_grid.x] + 1;")
for _ in range(2):
    (o,) = k(inputs=[mx.zeros((8,))], grid=(8, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(8,)],
             output_dtypes=[mx.float32])
    mx.eval(o)
print("ok", o.tolist())
"""


def test_mkpy_debug_levels(tmp_path):
    err = {}
    for level in (1, 2, 3, 0):
        r = run_py(DEBUG_SCRIPT, {"MKPY_DEBUG": level, "MKPY_CACHE_DIR": tmp_path})
        assert r.returncode == 0 and "ok [1.0" in r.stdout, r.stderr
        err[level] = r.stderr
    assert "[mkpy debug" not in err[0]
    for level in (1, 2, 3):
        e = err[level]
        # the first process compiles, the next ones find it on disk
        assert ("kernel `dbg_levels` (custom_kernel_dbg_levels_float_float): %s" %
                ("compiled in" if level == 1 else "disk cache hit")) in e
        assert "in-memory cache hit" in e and "plain engine" in e
        assert ".metal" in e and ".cpp" in e
    assert "launch `dbg_levels`: grid (8, 1, 1), threadgroup (4, 1, 1), 2 threadgroups" not in err[1]
    assert err[2].count("launch `dbg_levels`: grid (8, 1, 1), threadgroup (4, 1, 1), 2 threadgroups") == 2
    assert "generated Metal source" not in err[2]
    assert "[mkpy debug 3] generated Metal source:" in err[3] and "[[kernel]] void custom_kernel_dbg_levels" in err[3]
    assert "[mkpy debug 3] translated C++:" in err[3] and "mkpy_kernel_entry" in err[3]


# ----------------------------------------------------------- sources on disk

def test_verbose_and_errors_name_the_sources_on_disk(capsys):
    k = mx.fast.metal_kernel(name="dbg_oob", input_names=["x"], output_names=["out"],
                             source="out[thread_position_in_grid.x + 100000] = x[0];")
    (o,) = k(inputs=[mx.zeros((4,))], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
             output_dtypes=[mx.float32], verbose=True)
    with pytest.raises(RuntimeError) as e:
        mx.eval(o)
    msg = str(e.value)
    assert "Sources on disk:" in msg
    metal, cpp = msg.split("Sources on disk: ")[1].split(" (generated Metal), ")
    cpp = cpp.split(" (translated C++)")[0]
    assert os.path.exists(metal) and os.path.exists(cpp)
    assert "custom_kernel_dbg_oob" in open(metal).read() and "mkpy_kernel_entry" in open(cpp).read()
    assert "sources on disk: %s" % metal in capsys.readouterr().out

    bad = mx.fast.metal_kernel(name="dbg_bad", input_names=["x"], output_names=["out"],
                               source="out[0] = undeclared_thing;")
    (o,) = bad(inputs=[mx.zeros((1,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
               output_dtypes=[mx.float32])
    with pytest.raises(RuntimeError) as e:
        mx.eval(o)
    msg = str(e.value)
    assert "undeclared_thing" in msg and "Sources on disk:" in msg
    metal = msg.split("Sources on disk: ")[1].split(" (generated Metal)")[0]
    assert "undeclared_thing" in open(metal).read()


# ----------------------------------------------------------------- profiler

def test_capture_writes_a_chrome_trace_and_a_report(tmp_path):
    path = tmp_path / "trace.json"
    k = mx.fast.metal_kernel(name="dbg_prof", input_names=["x"], output_names=["out"], source="""
        threadgroup float t[32];
        uint i = thread_position_in_threadgroup.x;
        t[i] = x[thread_position_in_grid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = t[31 - i];
    """)
    mx.metal.start_capture(str(path))
    with pytest.raises(RuntimeError, match="already running"):
        mx.metal.start_capture(str(path))
    y = mx.exp(mx.ones((64,))) + 1
    (o,) = run1(k, [y], (64, 1, 1), (32, 1, 1), [(64,)])
    mx.metal.stop_capture()
    with pytest.raises(RuntimeError, match="No capture"):
        mx.metal.stop_capture()
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert isinstance(events, list)
    for ev in events:
        assert isinstance(ev["name"], str) and ev["ph"] in ("X", "M")
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "X":
            assert isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0
            assert ev["cat"] in ("op", "kernel", "compile", "run")
    ops = [ev["name"] for ev in events if ev.get("cat") == "op"]
    assert "exp" in ops and "add" in ops
    (kern,) = [ev for ev in events if ev.get("cat") == "kernel"]
    a = kern["args"]
    assert kern["name"] == "dbg_prof" and a["grid"] == [64, 1, 1] and a["threadgroup"] == [32, 1, 1]
    assert a["threads"] == 64 and a["threadgroups"] == 2 and a["barriers"] == 1
    assert a["cache"] == "compiled" and a["engine"] in ("lockstep", "fibers")
    for cat in ("compile", "run"):
        (sub,) = [ev for ev in events if ev.get("cat") == cat]
        assert kern["ts"] <= sub["ts"] and sub["ts"] + sub["dur"] <= kern["ts"] + kern["dur"] + 1e-3
    report = mx.metal.capture_report()
    head = report.splitlines()[1].split()
    assert head[:4] == ["kind", "name", "calls", "total"] and "barriers" in head and "engine" in head
    (row,) = [ln for ln in report.splitlines() if ln.startswith("kernel") and "dbg_prof" in ln]
    assert "64x1x1" in row and "32x1x1" in row
    # nothing is recorded once stopped
    mx.eval(mx.exp(mx.ones((3,))))
    assert mx.metal.capture_report() == report


# ------------------------------------------------------------- pytest repr

def test_arrays_print_in_pytest_messages():
    from _pytest._io.saferepr import saferepr

    x = mx.array([1, 2, 3])
    assert reprlib.repr(x) == repr(x)
    assert saferepr(x) == repr(x)
    import array

    assert reprlib.repr(array.array("i", [1, 2])) == "array('i', [1, 2])"


def test_failed_assert_in_pytest_shows_the_array(tmp_path):
    t = tmp_path / "test_fail.py"
    t.write_text("import mkpy as mx\n\ndef test_it():\n    x = mx.array([1.5, 2.5])\n    assert x.sum().item() == 0\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t)],
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120)
    assert "array([1.5, 2.5], dtype=float32)" in r.stdout, r.stdout
    assert "raised in repr()" not in r.stdout


# --------------------------------------------------------- assert_allclose

@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.int32, mx.uint8, mx.float64,
                                   mx.complex64, mx.bool_])
@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_assert_allclose_every_dtype(dtype):
    vals = [[1, 0, 1], [0, 1, 1]]
    a = mx.array(vals).astype(dtype)
    assert_allclose(a, a)
    assert_allclose(a, mx.array(vals).astype(mx.float32))
    b = mx.array([[1, 0, 1], [0, 1, 0]]).astype(dtype)
    with pytest.raises(AssertionError) as e:
        assert_allclose(a, b, rtol=1e-3, atol=0)
    msg = str(e.value)
    assert "Mismatched elements: 1 / 6" in msg
    assert "Worst element: index (1, 2)" in msg
    assert "Max absolute difference: 1" in msg
    assert "actual %s" % str(dtype).rsplit(".", 1)[-1] in msg


def test_assert_allclose_tolerances_nan_inf_and_shapes():
    a = mx.array([1.0, 2.0, float("nan"), float("inf")])
    assert_allclose(a, [1.0, 2.0 + 1e-6, float("nan"), float("inf")])
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 4"):
        assert_allclose(a, [1.0, 2.0, float("nan"), float("inf")], equal_nan=False)
    with pytest.raises(AssertionError) as e:
        assert_allclose(mx.array([1.0, 2.0, 3.0, 4.0]), [1.0, 2.5, 3.0, 4.1], rtol=0, atol=0.01)
    msg = str(e.value)
    assert "Mismatched elements: 2 / 4 (50%)" in msg and "index (1,)" in msg and "actual 2.0, expected 2.5" in msg
    assert "Max absolute difference: 0.5" in msg and "Max relative difference: 0.2" in msg
    with pytest.raises(AssertionError, match="Shapes differ"):
        assert_allclose(mx.zeros((2, 3)), mx.zeros((3, 2)))
    bf = mx.array([1.0, 2.0]).astype(mx.bfloat16)
    assert_allclose(bf, [1.001, 2.0], rtol=1e-2)
    with pytest.raises(AssertionError, match="actual bfloat16, expected float32"):
        assert_allclose(bf, mx.array([1.1, 2.0]), rtol=1e-3)


# ------------------------------------------------------------------- docs

def test_metal_kernel_docstrings_are_complete():
    doc = mx.fast.metal_kernel.__doc__
    for word in ("Args:", "input_names", "output_names", "header", "ensure_row_contiguous", "atomic_outputs",
                 "Returns:", "Example"):
        assert word in doc
    k = mx.fast.metal_kernel(name="dbg_doc", input_names=["x"], output_names=["out"], source="out[0] = x[0];")
    call = type(k).__call__.__doc__
    for word in ("inputs", "output_shapes", "output_dtypes", "grid", "threadgroup", "template", "init_value",
                 "verbose", "stream", "Returns:", "Raises:"):
        assert word in call
    (o,) = k.__call__(inputs=[mx.array([3.0])], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                      output_dtypes=[mx.float32])
    assert o.item() == 3.0
