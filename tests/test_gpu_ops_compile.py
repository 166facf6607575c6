"""The GPU op kernels compile (no GPU needed): every kernel the GPU evaluators
can ask for (each element-wise op and reduction for each dtype its node
accepts, every astype pair, the copies and where), compiled with NVRTC for
sm_80 and sm_90 through the evaluators' own source generator and options.
Skipped, with the reason, where NVRTC cannot be loaded."""
import pytest

import mkpy as mx


@pytest.mark.parametrize("sm", [80, 90])
def test_every_op_kernel_compiles(sm):
    try:
        n = mx.cuda._check_op_kernels(sm)
    except RuntimeError as e:
        if "NVRTC could not be loaded" in str(e):
            pytest.skip(str(e))
        raise
    # 44 unary and 24 binary ops over their dtypes, 169 astype pairs, 6 x 13
    # reductions (3 kernels each), copies and where for 4 element sizes
    assert n > 600
