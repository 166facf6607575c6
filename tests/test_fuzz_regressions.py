"""Kernels on which the engines once disagreed (issue #25): the bug of the issue, written by
hand, and the fuzzer's reduced cases (tests/data/fuzz_regressions.json, written by
tests/kernel_fuzz.py's reducer). Each runs on the lockstep engine and under the checker (which
runs cooperative kernels on fibers) and must give the value Metal gives, stored with the case;
the fuzzer's cases also run with MKPY_ENGINE=fibers. (On a machine with a GPU, `engine` is the
GPU: metal_kernel runs on the default GPU stream; `fibers` stays on the CPU stream, where the
fiber engine is.)"""
import contextlib
import json
import os
import sys

import numpy as np
import pytest

import mkpy as mx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_fuzz  # noqa: E402

with open(os.path.join(HERE, "data", "fuzz_regressions.json")) as f:
    CASES = json.load(f)


def run_case(entry, mode="engine"):
    case = kernel_fuzz.Case.from_json(entry["case"])
    header, source = kernel_fuzz.kernel_text(case)
    k = mx.fast.metal_kernel(name="fz_%s_%s" % (entry["name"], mode), input_names=["data"], output_names=["out"],
                             source=source, header=header)
    n = int(np.prod(case.grid()))
    o, = k(inputs=[mx.array(np.array(case.data, dtype=np.uint32))],
           template=[("K", case.k), ("T", getattr(mx, case.t))], grid=case.grid(), threadgroup=case.tg,
           output_shapes=[(n,)], output_dtypes=[mx.uint32])
    return np.array(o)


@pytest.mark.parametrize("mode", ["engine", "fibers", "checker"])
@pytest.mark.parametrize("entry", CASES, ids=[c["name"] for c in CASES])
def test_reduced_case(entry, mode, monkeypatch):
    if mode == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    where = mx.stream(mx.cpu) if mode == "fibers" else contextlib.nullcontext()
    with where, mx.metal.check(mode == "checker"):
        got = run_case(entry, mode)
    assert got.tolist() == entry["expected"], entry["note"]


SIMD_AFTER_LANE0 = """
    uint lane = thread_index_in_simdgroup;
    int n0 = int(%s);
    for (int t = 0; t < 3; ++t) {
        float s = -1.0f;
        if (n0 < 16) s = simd_sum(1.0f);
        if (lane == 0) out[t] = s;
    }
"""


@pytest.mark.parametrize("checked", [False, True], ids=["engine", "checker"])
@pytest.mark.parametrize("cond", ["threadgroup_position_in_grid.x", "threads_per_threadgroup.y", "x[0]", "0"])
def test_simd_sum_after_a_lane0_branch_in_a_loop(cond, checked):
    # issue #25: from the second iteration on, simd_sum under a uniform branch saw only lane 0
    k = mx.fast.metal_kernel(name="simd_after_lane0", input_names=["x"], output_names=["out"],
                             source=SIMD_AFTER_LANE0 % cond)
    with mx.metal.check(checked):
        o, = k(inputs=[mx.zeros((1,), dtype=mx.int32)], grid=(32, 1, 1), threadgroup=(32, 1, 1),
               output_shapes=[(3,)], output_dtypes=[mx.float32])
        assert np.array(o).tolist() == [32.0, 32.0, 32.0]
