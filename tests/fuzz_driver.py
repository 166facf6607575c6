"""The fuzz target of tests/test_fuzz.py, run in its own interpreter so that a crash is a
reported failure, not the end of pytest.

Three areas, in rounds until the time budget (seconds, argv[1]) is spent: array construction
(nested lists, NumPy arrays of every dtype, byte order and layout, huge and negative sizes),
indexing keys, and metal_kernel arguments (names, shapes, grids, templates, sources with NUL
bytes or huge lengths). Every failure must be a Python exception of an expected type: never
SystemError, a crash, a hang or a huge allocation. Before each case its description goes to
the file argv[2], so that the parent can name the case that crashed the process.

Sizes are either small (evaluated and compared with NumPy) or beyond any machine's memory
(must raise): nothing in between is allocated.
"""
import resource
import sys
import time

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mkpy as mx

BUDGET = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
LAST = sys.argv[2] if len(sys.argv) > 2 else None

# a safety net: a bug that allocates hugely fails here instead of hurting the machine
resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))

ALLOWED = (TypeError, ValueError, OverflowError, MemoryError, IndexError, UnicodeEncodeError, RuntimeError)


def note(what, *parts):
    if LAST:
        text = what + ": " + " | ".join(repr(p)[:2000] for p in parts)
        with open(LAST, "w") as f:
            f.write(text)


def guarded(fn, *args, **kw):
    """fn(...) or the exception it raised; SystemError and unexpected types are failures."""
    try:
        return fn(*args, **kw), None
    except SystemError:
        raise
    except ALLOWED as e:
        return None, e


COUNTS = {"array": 0, "numpy": 0, "shape": 0, "index": 0, "kernel": 0, "source": 0}

# ------------------------------------------------------------------ arrays

scalars = st.one_of(st.integers(-2**80, 2**80), st.integers(-300, 300), st.floats(allow_nan=True), st.booleans(),
                    st.complex_numbers(max_magnitude=1e6), st.none(), st.text(max_size=3))
nested = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.tuples(c, c), max_leaves=24)
dtypes = st.sampled_from([None, mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32,
                          mx.int64, mx.float16, mx.bfloat16, mx.float32, mx.float64, mx.complex64])


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(nested, dtypes)
def fuzz_array(value, dtype):
    COUNTS["array"] += 1
    note("mx.array", value, dtype)
    a, err = guarded(mx.array, value, dtype) if dtype is not None else guarded(mx.array, value)
    if a is not None and a.size <= 10**5:
        guarded(a.tolist)


np_dtypes = st.sampled_from(["?", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4", "f8", "c8", "c16",
                             ">i2", ">i4", ">i8", ">u4", ">f4", ">f8", "<f4", ">c8", "M8[s]", "U3", "O", "V4"])


@st.composite
def np_arrays(draw):
    dt = np.dtype(draw(np_dtypes))
    if dt.kind in "MUOV":
        return np.zeros(draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)), dtype=dt)
    arr = draw(hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    layout = draw(st.sampled_from(["c", "f", "t", "step", "neg"]))
    if arr.ndim and layout == "f":
        arr = np.asfortranarray(arr)
    elif arr.ndim > 1 and layout == "t":
        arr = arr.T
    elif arr.ndim and layout == "step":
        arr = arr[::2]
    elif arr.ndim and layout == "neg":
        arr = arr[::-1]
    return arr


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(np_arrays())
def fuzz_numpy(arr):
    COUNTS["numpy"] += 1
    note("mx.array(numpy)", arr.dtype.str, arr.shape, arr.strides)
    a, err = guarded(mx.array, arr)
    if a is None:
        # MLX refuses these too (RuntimeError std::bad_cast); mkpy names the format
        assert arr.dtype.kind in "MUOV" or not arr.dtype.isnative, (arr.dtype, err)
        return
    back = np.array(a)
    assert back.shape == arr.shape
    if arr.dtype.kind in "biufc":
        expect = arr.astype(back.dtype)
        assert np.array_equal(back, expect, equal_nan=True), (arr, back)


sizes = st.one_of(st.integers(-3, 6), st.integers(-2**70, 2**70), st.sampled_from([2**31, 2**32, 2**40, 2**62, 2**63 - 1]))


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(sizes, max_size=5), st.sampled_from([mx.zeros, mx.ones]), dtypes)
def fuzz_shape(shape, make, dtype):
    COUNTS["shape"] += 1
    note("shape", make.__name__, shape, dtype)
    n = 1
    for s in shape:
        n *= s
    if all(s >= 0 for s in shape) and 10**6 < n < 2**44:
        return  # a real allocation of a size this machine may have: not a fuzz case
    a, err = guarded(make, shape, dtype) if dtype is not None else guarded(make, shape)
    if a is None:
        return
    r, err = guarded(mx.eval, a)
    if err is None:
        assert n <= 10**6, (shape, "a huge array was allocated")
        assert a.shape == tuple(shape)
    else:
        assert isinstance(err, (MemoryError, ValueError, OverflowError)), err


# ------------------------------------------------------------------ indexing

BASE = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
XB = mx.array(BASE)
ints = st.one_of(st.integers(-5, 5), st.integers(-2**70, 2**70), st.sampled_from([2**31, -2**31 - 1, 2**63]))
slices = st.builds(slice, st.none() | ints, st.none() | ints, st.none() | ints)
atoms = st.one_of(ints, slices, st.none(), st.just(Ellipsis), st.booleans(),
                  st.lists(st.integers(-4, 3), max_size=4), st.just(1.5), st.text(max_size=2),
                  st.lists(st.integers(-4, 3), min_size=1, max_size=3).map(lambda v: mx.array(v)),
                  st.lists(st.booleans(), min_size=2, max_size=2).map(lambda v: mx.array(v)))
keys = st.one_of(atoms, st.tuples(atoms), st.tuples(atoms, atoms), st.tuples(atoms, atoms, atoms, atoms))


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(keys)
def fuzz_index(key):
    COUNTS["index"] += 1
    note("index", key)
    r, err = guarded(XB.__getitem__, key)
    if r is not None:
        guarded(mx.eval, r)
    upd = XB * 1
    guarded(upd.__setitem__, key, 7.0)
    guarded(mx.eval, upd)


# ------------------------------------------------------------------ metal_kernel

SOURCE = "uint i = thread_position_in_grid.x;\nif (i < inp_shape[0]) out[i] = inp[i] * 2;"
KERNEL = mx.fast.metal_kernel(name="fuzz", input_names=["inp"], output_names=["out"], source=SOURCE)
X4 = mx.arange(4, dtype=mx.float32)

dims = st.one_of(st.integers(-2, 5), st.integers(-2**70, 2**70), st.sampled_from([2**32 - 1, 2**32, 2**62]),
                 st.floats(allow_nan=True), st.none(), st.text(max_size=2),
                 st.integers(0, 5).map(lambda v: mx.array(v, dtype=mx.uint32)),
                 st.integers(1, 5).map(lambda v: mx.divide(mx.array(v), mx.array(1))))
triples = st.one_of(st.tuples(dims, dims, dims), st.lists(dims, max_size=4), dims)
shapes = st.one_of(st.lists(dims, max_size=3), st.tuples(st.integers(-2**70, 2**70)), dims)
templ_values = st.one_of(st.integers(-2**40, 2**40), st.booleans(), st.floats(),
                         st.sampled_from([mx.float32, mx.float64, mx.int32, mx.float16, mx.bool_]), st.text(max_size=2))
templates = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=4), templ_values), max_size=3),
                      st.lists(st.tuples(st.text(max_size=2)), max_size=2), st.text(max_size=2))


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(shapes, triples, triples, templates, st.sampled_from([mx.float32, mx.int32, mx.float64, None]))
def fuzz_kernel_call(shape, grid, tg, template, dtype):
    COUNTS["kernel"] += 1
    note("kernel call", shape, grid, tg, template, dtype)
    outs, err = guarded(KERNEL, inputs=[X4], output_shapes=[shape], output_dtypes=[dtype], grid=grid,
                        threadgroup=tg, template=template)
    if outs is None:
        assert not isinstance(err, RuntimeError), err
        return
    out = outs[0]
    gsize = 1
    for g in grid:
        gsize *= int(g)
    if out.size > 10**5 or gsize > 4096 or template:
        return  # valid but too large to run here, or a new compile: not evaluated
    guarded(mx.eval, out)


texts = st.one_of(st.text(max_size=40), st.just("a\0b"), st.just("\ud800"),
                  st.integers(0, 3).map(lambda k: "x" * (10 ** (3 + k))), st.none(), st.integers(),
                  st.sampled_from(["double d;", "goto x;", "#include <stdio.h>\n", "float g = 0;", "threadgroup",
                                   "(*f)(", "int f() { return f(); }", "/* unterminated", "\"open", "#", "{{{", "}}"]))
name_lists = st.one_of(st.lists(texts, max_size=3), texts, st.none())


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(texts, name_lists, name_lists, texts, texts)
def fuzz_kernel_make(name, in_names, out_names, source, header):
    COUNTS["source"] += 1
    note("metal_kernel", name, in_names, out_names, source, header)
    k, err = guarded(mx.fast.metal_kernel, name=name, input_names=in_names, output_names=out_names, source=source,
                     header=header)
    if k is None:
        assert isinstance(err, (TypeError, ValueError, UnicodeEncodeError)), repr(err)


def main():
    deadline = time.monotonic() + BUDGET
    targets = [fuzz_array, fuzz_numpy, fuzz_shape, fuzz_index, fuzz_kernel_call, fuzz_kernel_make]
    rounds = 0
    while time.monotonic() < deadline:
        for t in targets:
            t()
            if time.monotonic() >= deadline:
                break
        rounds += 1
    print("fuzz cases:", COUNTS, "rounds:", rounds)


if __name__ == "__main__":
    main()
