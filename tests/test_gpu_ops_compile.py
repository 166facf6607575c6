"""The GPU op kernels compile (no GPU needed): every kernel the GPU evaluators
can ask for (each element-wise op and reduction for each dtype its node
accepts, every astype pair, the copies and where, mx.fast's norms, rope,
attention and the softmax rows for each float dtype, and ops_idx.c's and the
arg reductions' kernels: gathers, assignments, pads and fills for each element
size and number of index arrays, scatter reductions, scans, arg reductions and
integer aranges for each dtype their nodes accept), compiled with NVRTC for
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
    # reductions (3 kernels each), copies and where for 4 element sizes (1239
    # kernels), mx.fast's 24: norm for 3 x 3 (input, output) dtypes, rope, the
    # softmax rows and attention's 3 kernels for 3 dtypes, and 490 for indexing:
    # 2 x 13 arg reductions (3 kernels each), gathers and assignments (2
    # kernels) for 4 element sizes x 0-4 index arrays, pads, fills and
    # put_along_axis assignments for 4 sizes, scatter reductions for each
    # (op, dtype) x 0-4 index arrays, put_along_axis reductions, scans and
    # integer aranges for each dtype
    assert n >= 1239 + 24 + 490
