"""A rank that fails, under mpirun (tests/test_distributed_mpi.py starts it).

    mpirun -np 2 python tests/mpi/failure.py raise|kill

Rank 1 raises (or kills itself) before the collective; rank 0 enters all_sum. With mpirun's
abort on a failed rank turned off, rank 0 must fail with the timeout error of MKPY_DIST_TIMEOUT
and the group must then refuse further transfers at once; it prints TIMEOUT-OK and exits 3.
"""
import os
import signal
import sys
import time

import mkpy as mx

g = mx.distributed.init(strict=True)
mx.eval(mx.distributed.all_sum(mx.ones(4)))  # both ranks are up
if g.rank() == 1:
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("rank 1 fails on purpose")
t0 = time.monotonic()
try:
    mx.eval(mx.distributed.all_sum(mx.ones(4)))
    sys.exit("rank 0: all_sum returned")
except RuntimeError as e:
    waited = time.monotonic() - t0
    assert "timed out" in str(e) and "MKPY_DIST_TIMEOUT" in str(e), e
t1 = time.monotonic()
try:
    mx.eval(mx.distributed.all_gather(mx.ones(4)))
    sys.exit("rank 0: all_gather after a timeout returned")
except RuntimeError as e:
    assert "cannot be used" in str(e), e
print(f"TIMEOUT-OK waited={waited:.1f} then={time.monotonic() - t1:.3f}", flush=True)
sys.exit(3)
