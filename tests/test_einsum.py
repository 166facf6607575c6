"""einsum and einsum_path, checked against NumPy."""
import numpy as np
import pytest

import mkpy as mx

rng = np.random.default_rng(1)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def check(subs, *arrays, tol=1e-4):
    r = mx.einsum(subs, *[mx.array(a) for a in arrays])
    ref = np.einsum(subs, *arrays)
    assert r.shape == ref.shape, (subs, r.shape, ref.shape)
    np.testing.assert_allclose(np.array(r), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "subs,shapes",
    [
        ("ij->ji", [(3, 4)]),
        ("ij->", [(3, 4)]),
        ("ij", [(3, 4)]),
        ("ji", [(3, 4)]),
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),
        ("iji->j", [(3, 2, 3)]),
        ("ijij->ij", [(3, 2, 3, 2)]),
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("ij,jk->ijk", [(3, 4), (4, 5)]),
        ("i,i->", [(5,), (5,)]),
        ("i,j->ij", [(3,), (4,)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("ij,kj->", [(3, 4), (2, 4)]),
        ("ii,ij->j", [(3, 3), (3, 4)]),
        ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
        ("ea,fb,abcd,gc,hd->efgh", [(2, 3), (2, 4), (3, 4, 3, 2), (2, 3), (2, 2)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("i...->...", [(3, 2, 4)]),
        ("...,...", [(2, 3), (2, 3)]),
        ("ij,ij->ij", [(1, 4), (3, 4)]),
        (" ij , jk -> ik ", [(2, 3), (3, 2)]),
        ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 5), (5, 2)]),
    ],
)
def test_against_numpy(subs, shapes):
    arrays = [rand(*s) for s in shapes]
    if subs == "ij,ij->ij":  # size-1 broadcast: numpy broadcasts these too
        pass
    check(subs, *arrays)


def test_dtypes_and_ints():
    a = np.arange(16, dtype=np.int32).reshape(4, 4)
    r = mx.einsum("ii->i", mx.array(a))
    assert r.dtype == mx.int32
    np.testing.assert_array_equal(np.array(r), np.einsum("ii->i", a))
    r = mx.einsum("ij,jk", mx.array(rand(2, 3), dtype=mx.float16), mx.array(rand(3, 2), dtype=mx.float16))
    assert r.dtype == mx.float16


def test_paths():
    a, b, c = mx.zeros((5, 8)), mx.zeros((8, 3)), mx.zeros((3, 7))
    assert mx.einsum_path("ii", mx.zeros((5, 5)))[0] == [(0,)]
    assert mx.einsum_path("ij,jk", a, b)[0] == [(0, 1)]
    assert mx.einsum_path("ij,jk,kl", a, b, c)[0] == [(0, 1), (0, 1)]
    assert mx.einsum_path("ij,jk,kl", a, mx.zeros((8, 10)), mx.zeros((10, 7)))[0] == [(1, 2), (0, 1)]
    path, report = mx.einsum_path("ij,jk", a, b)
    assert "Complete contraction:  ij,jk" in report and "Naive FLOP count:" in report
    sizes = dict(zip("abcdefghijklmopqABC", [2, 3, 4, 5, 4, 3, 2, 6, 5, 4, 3, 2, 5, 7, 4, 3, 2, 3, 4]))
    for case in ["eb,cb,fb->cef", "dd,fb,be,cdb->cef", "bca,cdb,dbf,afc->", "dcc,fce,ea,dbf->ab"]:
        ins = [np.ones([sizes[ch] for ch in s]) for s in case.split("->")[0].split(",")]
        np_path = np.einsum_path(case, *ins, optimize="greedy")[0][1:]
        assert mx.einsum_path(case, *[mx.array(x) for x in ins])[0] == np_path, case
        check(case, *[x.astype(np.float32) for x in ins])


def test_errors():
    a = mx.zeros((3, 4))
    with pytest.raises(ValueError, match=r"\[einsum\] At least one operand is required."):
        mx.einsum("ij")
    with pytest.raises(ValueError, match=r"\[einsum\] Number of operands, 1, does not match number of input subscripts, 2"):
        mx.einsum("ij,jk", a)
    with pytest.raises(ValueError, match=r"\[einsum\] Subscripts must be letters, but got '1'."):
        mx.einsum("i1", a)
    with pytest.raises(ValueError, match=r"Only one ellipsis per subscript is allowed"):
        mx.einsum("......", a)
    with pytest.raises(ValueError, match=r"\[einsum\] Repeat indices not allowed in output."):
        mx.einsum("ij->ii", a)
    with pytest.raises(ValueError, match=r"Invalid number of subscripts 3 for input 0 with 2 dimensions."):
        mx.einsum("ijk", a)
    with pytest.raises(ValueError, match=r"Dimensions of repeated subscripts do not have the same size \(3 != 4\)."):
        mx.einsum("ii", a)
    with pytest.raises(ValueError, match=r"Cannot broadcast dimension 0 of input 1 with shape \(5,4\) to size 4."):
        mx.einsum("ij,jk", a, mx.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"has insufficient dimensions for subscript"):
        mx.einsum("ijk...", a)
    with pytest.raises(ValueError, match=r"\[einsum_path\] At least one operand is required."):
        mx.einsum_path("ij")
