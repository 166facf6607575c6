"""The GPU op kernels compile (no GPU needed): every kernel the GPU evaluators
can ask for (each element-wise op, reduction, arg reduction, scatter
reduction and scan for each dtype its node accepts, every astype pair, the
copies and where, the gathers, assignments, pads and fills for each element
size and number of index arrays, integer arange, and mx.fast's norms, rope,
attention and the softmax rows for each float dtype), compiled with NVRTC for
sm_80 through the evaluators' own source generator and options (they use
nothing architecture-specific; sm_90 compiles them on the H200 whenever they
run there, and MKPY_OP_KERNEL_ARCHS=80,90 checks both here). Skipped, with the
reason, where NVRTC cannot be loaded."""
import os

import pytest

import mkpy as mx


@pytest.mark.parametrize("sm", [int(a) for a in os.environ.get("MKPY_OP_KERNEL_ARCHS", "80").split(",")])
def test_every_op_kernel_compiles(sm):
    try:
        n = mx.cuda._check_op_kernels(sm)
    except RuntimeError as e:
        if "NVRTC could not be loaded" in str(e):
            pytest.skip(str(e))
        raise
    # 44 unary and 24 binary ops over their dtypes, 169 astype pairs, 6 x 13
    # reductions and 2 x 13 arg reductions (3 kernels each), copies and where
    # for 4 element sizes; ops_idx.c: gathers and assignments (2 kernels) for 4
    # element sizes x 0-4 index arrays, scatter reductions for 0-4 index arrays,
    # put_along_axis, pads, fills, scans and integer aranges; mx.fast's 24: norm
    # for 3 x 3 (input, output) dtypes, rope, the softmax rows and attention's 3
    # kernels for 3 dtypes
    assert n > 1500 + 24
