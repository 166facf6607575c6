"""hadamard_transform for n = m * 2^k, m in 1, 12, 20, 28 (MLX's sizes).

The m x m matrices are rebuilt here from their constructions (Paley's second
construction for 12, Williamson's array for 20 and 28) and the transform is
checked against the definition: y = (H_m (x) H_2^k) x * scale along the last
axis.
"""
import numpy as np
import pytest

import mkpy as mx


def _chi(a, q):
    a %= q
    if a == 0:
        return 0
    return 1 if pow(a, (q - 1) // 2, q) == 1 else -1


def _paley2(q):
    # symmetric conference matrix of order q + 1, then the doubling
    c = np.zeros((q + 1, q + 1), dtype=np.int64)
    c[0, 1:] = 1
    c[1:, 0] = 1
    for i in range(q):
        for j in range(q):
            c[i + 1, j + 1] = _chi(j - i, q)
    return np.kron(c, [[1, 1], [1, -1]]) + np.kron(np.eye(q + 1, dtype=np.int64), [[1, -1], [-1, -1]])


def _circulant(row):
    n = len(row)
    return np.array([[row[(j - i) % n] for j in range(n)] for i in range(n)])


def _williamson(n):
    s = np.where(np.arange(n) == 0, 1, -1)

    def m_k(k):
        return np.where(np.isin(np.arange(n), [0, k, n - k]), -1, 1)

    rows = [s, -s, m_k(1), m_k(2)] if n == 5 else [s, m_k(1), m_k(2), m_k(3)]
    a, b, c, d = (_circulant(r) for r in rows)
    w = np.block([[a, b, c, d], [-b, a, -d, c], [-c, d, a, -b], [-d, -c, b, a]])
    return w.T  # the transform applies the transposed array


def _sylvester(n):
    h = np.array([[1]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


MATRICES = {12: _paley2(5), 20: _williamson(5), 28: _williamson(7)}


@pytest.mark.parametrize("m", [12, 20, 28])
def test_matrices_are_hadamard(m):
    h = MATRICES[m]
    assert np.array_equal(h @ h.T, m * np.eye(m))
    # the transform of the identity (scale 1) gives the matrix row by row
    got = np.array(mx.hadamard_transform(mx.eye(m), scale=1.0))
    assert np.array_equal(got, h.T.astype(np.float32))


@pytest.mark.parametrize("m,k", [(12, 0), (12, 1), (12, 3), (20, 0), (20, 2), (28, 1), (28, 4)])
def test_transform_matches_definition(m, k):
    n = m << k
    x = np.random.RandomState(n).randn(3, 2, n).astype(np.float32)
    full = np.kron(MATRICES[m], _sylvester(1 << k)).astype(np.float64)
    want = x.astype(np.float64) @ full.T / np.sqrt(n)
    np.testing.assert_allclose(np.array(mx.hadamard_transform(mx.array(x))), want, rtol=1e-5, atol=1e-4)
    want2 = x.astype(np.float64) @ full.T * 0.5
    np.testing.assert_allclose(np.array(mx.hadamard_transform(mx.array(x), scale=0.5)), want2, rtol=1e-5, atol=1e-4)


def test_dtypes():
    x = np.random.RandomState(1).randn(4, 24).astype(np.float16)
    y = mx.hadamard_transform(mx.array(x))
    assert y.dtype == mx.float16
    want = x.astype(np.float64) @ np.kron(MATRICES[12], _sylvester(2)).T / np.sqrt(24)
    np.testing.assert_allclose(np.array(y).astype(np.float64), want, rtol=2e-3, atol=2e-3)
    assert mx.hadamard_transform(mx.ones((40,), dtype=mx.int32)).dtype == mx.float32
    assert mx.hadamard_transform(mx.ones((40,), dtype=mx.bfloat16)).dtype == mx.bfloat16


@pytest.mark.parametrize("n", [3, 5, 6, 36, 60, 120, 44])
def test_unsupported_sizes_raise(n):
    # 36 = 12 * 3 and 60 = 12 * 5: the quotient is not a power of two
    with pytest.raises(ValueError, match=r"m\*2\^k where m in \(1, 12, 20, 28\)"):
        mx.hadamard_transform(mx.ones((2, n)))


def test_gradient_is_the_transpose():
    # the vjp of y = K x is K^T c (K not symmetric for m = 20, 28)
    n = 40
    k = np.kron(MATRICES[20], _sylvester(2)) / np.sqrt(n)
    w = np.arange(n, dtype=np.float32)
    g = mx.grad(lambda x: (mx.hadamard_transform(x) * mx.array(w)).sum())(mx.zeros((n,)))
    np.testing.assert_allclose(np.array(g), k.T @ w, rtol=1e-5, atol=1e-4)
