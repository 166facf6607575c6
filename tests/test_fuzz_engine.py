"""The engines' differential fuzzer (tests/kernel_fuzz.py, issue #25), bounded: random
well-defined kernels run on the lockstep engine, the fiber engine and the checker, which must
agree and report nothing. One run with a fixed seed and one with a fresh seed, printed (and in
the test's failure message) so that a failure can be replayed with
`python tests/kernel_fuzz.py --seed N`. MKPY_FUZZ_ENGINE_SECONDS sets each run's budget
(30 s by default); `make fuzz-engine` runs for as long as asked."""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_fuzz  # noqa: E402

SECONDS = float(os.environ.get("MKPY_FUZZ_ENGINE_SECONDS", "30"))
FRESH = random.randrange(1 << 31)


@pytest.mark.parametrize("seed", [20251125, FRESH], ids=["fixed-seed", "fresh-seed-%d" % FRESH])
def test_engines_agree_on_generated_kernels(seed):
    print("\nkernel fuzz seed %d (replay: python tests/kernel_fuzz.py --seed %d)" % (seed, seed))
    lines = []
    n, fails = kernel_fuzz.fuzz(seconds=SECONDS, seed=seed, per_compile=2, log=lines.append,
                                stop_on_failure=True)
    assert n > 0
    assert not fails, "seed %d: %d of %d kernels disagree:\n%s" % (seed, len(fails), n, "\n".join(lines)[-6000:])
