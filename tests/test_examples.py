"""Every script in examples/ runs in its own interpreter, exits 0 and ends with a check line
that says True (or OK).

The scripts run concurrently (one per core) and share one fresh kernel cache directory, so a
kernel that several examples use compiles once.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
TIMEOUT_S = 180

def _run(path, cache_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MKPY_CACHE_DIR"] = cache_dir
    env["PYTHONIOENCODING"] = "utf-8"
    try:
        return subprocess.run([sys.executable, str(path)], cwd=str(ROOT), env=env, capture_output=True,
                              text=True, encoding="utf-8", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return e


@pytest.fixture(scope="module")
def results():
    """Starts every runnable example at once (bounded by the core count); name -> future."""
    cache_dir = tempfile.mkdtemp(prefix="mkpy-examples-cache-")
    workers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {p.name: pool.submit(_run, p, cache_dir) for p in EXAMPLES}
        yield futures


def test_examples_exist():
    assert len(EXAMPLES) >= 30


@pytest.mark.parametrize("name", [p.name for p in EXAMPLES])
def test_example(name, results):
    proc = results[name].result()
    if isinstance(proc, subprocess.TimeoutExpired):
        pytest.fail(f"{name} ran longer than {TIMEOUT_S} s")
    report = f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{name} exited with {proc.returncode}\n{report}"
    lines = [line.rstrip() for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"{name} printed nothing\n{report}"
    assert lines[-1].endswith(("True", "OK")), f"{name}: the check line does not say True\n{report}"
