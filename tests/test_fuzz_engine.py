"""The engines' differential fuzzer (tests/kernel_fuzz.py, issue #25), bounded: random
well-defined kernels run on the lockstep engine, the fiber engine and the checker, which must
agree and report nothing (and on the GPU where there is one; without one, NVRTC compiles each
kernel for CUDA sm_80 when it loads). One run with a fixed seed and one with a fresh seed, printed (and in
the test's failure message) so that a failure can be replayed with
`python tests/kernel_fuzz.py --seed N`. MKPY_FUZZ_ENGINE_SECONDS sets each run's budget
(30 s by default); `make fuzz-engine` runs for as long as asked. A third test runs the
driver's --jobs mode (several fuzz processes, one summary) for one kernel per job."""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_fuzz  # noqa: E402

SECONDS = float(os.environ.get("MKPY_FUZZ_ENGINE_SECONDS", "30"))


# The fresh seed is drawn when the test runs, not when it is collected: pytest-xdist's workers
# each collect the module and must see the same test ids.
@pytest.mark.parametrize("seed", [20251125, None], ids=["fixed-seed", "fresh-seed"])
def test_engines_agree_on_generated_kernels(seed):
    if seed is None:
        seed = random.randrange(1 << 31)
    print("\nkernel fuzz seed %d (replay: python tests/kernel_fuzz.py --seed %d)" % (seed, seed))
    lines = []
    n, fails = kernel_fuzz.fuzz(seconds=SECONDS, seed=seed, per_compile=2, log=lines.append,
                                stop_on_failure=True)
    print("\n".join(x for x in lines if x.startswith("engines:")) + "\n%d kernels" % n)
    assert n > 0
    assert not fails, "seed %d: %d of %d kernels disagree:\n%s" % (seed, len(fails), n, "\n".join(lines)[-6000:])


def test_jobs_merge_into_one_summary():
    # --jobs N (the long runs on many cores): N processes with seeds derived from the run's, their
    # kernels shared out and counted in one summary line
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, os.path.join(root, "tests", "kernel_fuzz.py"), "--jobs", "2", "--kernels", "2",
                        "--per-compile", "1", "--seed", "11"], capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, PYTHONPATH=root))
    seeds = [kernel_fuzz.job_seed(11, j) for j in range(2)]
    assert seeds[0] != seeds[1]
    assert "seeds %d %d" % tuple(seeds) in r.stdout, r.stdout
    for j, s in enumerate(seeds):
        assert "[job %d] kernel fuzz: seed %d" % (j, s) in r.stdout, r.stdout
    assert "kernel fuzz: 2 kernels in 2 compiles" in r.stdout and "0 disagreements (seed 11, 2 jobs)" in r.stdout, \
        r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
