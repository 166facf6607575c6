"""Kernel caches: in memory within a process, on disk across processes."""
import os
import subprocess
import sys

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
