"""The CUDA prologue's thread attributes, checked on the host: mkpy_cuda.h's cuda_thread_attrs
(what every translated kernel runs first on a GPU), with the launch struct the host fills
(mkpy_cuda_launch.h's mkpy_cuda_launch_fill), against thread_attrs' formulas (the MLX-hosted
prologue, mkpy_group_extent's extents) for every thread of random dispatches: whole and partial
threadgroups, one row or several. The functions are taken from the header's text and compiled for
the host with stand-ins for blockIdx, threadIdx and __umulhi, so this runs without a GPU;
tests/test_kernel_exec.py checks the same attributes on one (make test-gpu)."""
import os
import re
import subprocess

import pytest

from test_runtime_header import _find_cxx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "mkpy", "include")
FUNCTIONS = ["set_attrs", "group_position", "thread_attrs", "fast_div", "cuda_thread_attrs"]

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mkpy_launch.h"
#include "mkpy_cuda_launch.h"
struct dim3_ { unsigned x, y, z; };
static dim3_ blockIdx, threadIdx;
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
namespace mkpy {
%s
}
static uint64_t state = 88172645463325252ull;
static unsigned rnd(unsigned n) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state %% n; }
int main(int argc, char **argv) {
    long threads_checked = 0, bad = 0, shapes[4] = {0};
    for (int it = 0; it < atoi(argv[1]); it++) {
        uint32_t grid[3], tg[3], ngroups[3];
        for (int d = 0; d < 3; d++) {
            tg[d] = rnd(3) == 0 ? 1 : 1 + rnd(d == 0 ? 70 : 7);
            const unsigned k = 1 + rnd(4);
            grid[d] = rnd(2) ? tg[d] * k : 1 + rnd(tg[d] * k);
            if (tg[d] > grid[d]) tg[d] = grid[d];
            ngroups[d] = (grid[d] + tg[d] - 1) / tg[d];
        }
        const unsigned threads = tg[0] * tg[1] * tg[2];
        if (threads > 1024) continue;
        struct mkpy_cuda_launch L;
        mkpy_cuda_launch_fill(&L, grid, tg, ngroups);
        shapes[L.shape & 3]++;
        for (unsigned bz = 0; bz < ngroups[2]; bz++)
            for (unsigned by = 0; by < ngroups[1]; by++)
                for (unsigned bx = 0; bx < ngroups[0]; bx++)
                    for (unsigned i = 0; i < threads; i++) {
                        blockIdx = {bx, by, bz};
                        threadIdx = {i, 0, 0};
                        const uint32_t b[3] = {bx, by, bz};
                        mkpy_thread_attrs got, want;
                        memset(&got, 0, sizeof got);
                        memset(&want, 0, sizeof want);
                        const bool runs = mkpy::cuda_thread_attrs(L, got);
                        const bool should = mkpy::thread_attrs(grid, tg, ngroups, b, i, want);
                        // the prologue a kernel gets: only the attributes it reads (here none, and the
                        // position in the grid with the index in the group), the others left as they were
                        mkpy_thread_attrs none, pos, zero;
                        memset(&none, 0, sizeof none);
                        memset(&pos, 0, sizeof pos);
                        memset(&zero, 0, sizeof zero);
                        const bool runs0 = mkpy::cuda_thread_attrs<0u>(L, none);
                        const bool runs_pos = mkpy::cuda_thread_attrs<MKPY_ATTR_THREAD_POSITION_IN_GRID |
                                                                      MKPY_ATTR_THREAD_INDEX_IN_THREADGROUP>(L, pos);
                        bool pos_ok = memcmp(&none, &zero, sizeof zero) == 0;
                        if (runs) {
                            pos_ok = pos_ok && memcmp(pos.thread_position_in_grid, want.thread_position_in_grid, 12) == 0 &&
                                     pos.thread_index_in_threadgroup == want.thread_index_in_threadgroup;
                            memset(pos.thread_position_in_grid, 0, 12);
                            pos.thread_index_in_threadgroup = 0;
                            pos_ok = pos_ok && memcmp(&pos, &zero, sizeof zero) == 0;
                        }
                        threads_checked++;
                        if (runs != should || runs0 != should || runs_pos != should || !pos_ok ||
                            (runs && memcmp(&got, &want, sizeof got) != 0)) {
                            if (bad++ < 5)
                                printf("differs: grid %%u %%u %%u, threadgroup %%u %%u %%u, group %%u %%u %%u, thread %%u\n",
                                       grid[0], grid[1], grid[2], tg[0], tg[1], tg[2], bx, by, bz, i);
                        }
                    }
    }
    printf("threads %%ld bad %%ld shapes %%ld %%ld %%ld %%ld\n", threads_checked, bad, shapes[0], shapes[1],
           shapes[2], shapes[3]);
    return bad != 0;
}
"""


def _function(text, name):
    """The text of `[template <...>] inline ... name(...) {...}` in the header (up to its closing brace at
    column 0)."""
    m = re.search(r"^(template <[^\n]*>\n)?inline [^\n]*\b%s\(" % name, text, re.M)
    assert m, "mkpy_cuda.h has no inline function %s" % name
    end = text.index("\n}\n", m.start()) + 3
    return text[m.start():end]


def test_cuda_prologue_gives_metal_attributes_on_random_dispatches(tmp_path):
    cxx, why = _find_cxx()
    if not cxx:
        pytest.skip(why)
    text = open(os.path.join(INCLUDE, "mkpy_cuda.h")).read()
    src = tmp_path / "prologue.cpp"
    src.write_text(HARNESS % "\n".join(_function(text, n) for n in FUNCTIONS))
    exe = tmp_path / "prologue"
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-w", "-DMKPY_CUDA_HOSTED", "-I", INCLUDE, str(src), "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe), "1500"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    m = re.search(r"threads (\d+) bad 0 shapes (\d+) (\d+) (\d+) (\d+)", r.stdout)
    assert m, r.stdout
    # every path of the prologue was taken: general, whole, one-row, whole one-row
    assert int(m.group(1)) > 100000 and all(int(m.group(i)) > 20 for i in range(2, 6)), r.stdout
