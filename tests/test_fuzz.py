"""Bad input in general (issue #11): a time-bounded fuzz run with hypothesis over array
construction, indexing keys and metal_kernel arguments (tests/fuzz_driver.py). It runs in its
own interpreter, so a crash or a hang is a failure naming the last case, not the end of pytest.

The budget is MKPY_FUZZ_SECONDS (default 20 s in `make test`); run longer by hand, e.g.
`MKPY_FUZZ_SECONDS=600 PYTHONPATH=. python3 -m pytest -q tests/test_fuzz.py`.
"""
import os
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_fuzz_never_crashes_hangs_or_allocates_hugely():
    budget = float(os.environ.get("MKPY_FUZZ_SECONDS", "20"))
    fd, last = tempfile.mkstemp(prefix="mkpy-fuzz-last-")
    os.close(fd)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "fuzz_driver.py"), str(budget), last],
                           env=env, capture_output=True, text=True, timeout=budget + 180,
                           cwd=tempfile.gettempdir())  # hypothesis's .hypothesis/ stays out of the tree
    except subprocess.TimeoutExpired as e:
        with open(last) as f:
            raise AssertionError(f"the fuzz run hung; last case: {f.read()}\n{e.stdout}\n{e.stderr}")
    with open(last) as f:
        case = f.read()
    os.unlink(last)
    if r.returncode < 0:
        raise AssertionError(f"the fuzz run died of {signal.Signals(-r.returncode).name}; last case: {case}\n"
                             f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    assert r.returncode == 0, f"last case: {case}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "fuzz cases:" in r.stdout, r.stdout
