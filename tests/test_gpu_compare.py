"""gpu_compare's tolerance for float sums whose terms the GPU adds in another order (TERMS), checked
without a GPU on sums modelled in NumPy: rows of a scatter-add onto repeated targets, rounded to
float16, bfloat16 or float32 after every update, in every order, agree within it; the same rows
with an update dropped or doubled do not. And mismatches() applies it through the ("terms",) + key
entries."""
import itertools

import numpy as np

import mkpy as mx

from gpu_compare import TERMS, magnitudes, mismatches, within_terms

EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23}


def _round(v, dt):
    """v (float64) rounded to dt, as float64 (bfloat16: to nearest even on float32's bits)."""
    if dt == "bfloat16":
        b = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.asarray(v).astype(dt).astype(np.float64)


def _scatter(x, updates, dt):
    """x plus each row of updates in turn, rounded to dt after each (an atomic add's order)."""
    acc = _round(x, dt)
    for u in updates:
        acc = _round(acc + _round(u, dt), dt)
    return acc


def _rows(rng, k):
    """A target row and its k updates of 9 columns, magnitudes ~4 with large terms that cancel."""
    x = rng.standard_normal(9) * 4
    ups = rng.standard_normal((k, 9)) * 4
    ups[0, :3] = [300.7, -129.5, 88.5]  # as the tests' special values: cancellation
    x[:3] = [-300.7, 129.5, -88.5]
    return x, ups


def test_orders_agree_and_a_dropped_or_doubled_update_does_not():
    rng = np.random.default_rng(0)
    for dt in ["float16", "bfloat16", "float32"]:
        for _ in range(300):
            k = int(rng.integers(2, 5))
            x, ups = _rows(rng, k)
            s = np.abs(_round(x, dt)) + np.abs(np.array([_round(u, dt) for u in ups])).sum(0)
            ref = _scatter(x, ups, dt)
            for perm in itertools.permutations(range(k)):
                other = _scatter(x, ups[list(perm)], dt)
                assert within_terms(other, ref, s, EPS[dt]).all(), (dt, perm)
            for j in range(k):
                dropped = _scatter(x, np.delete(ups, j, axis=0), dt)
                doubled = _scatter(x, np.concatenate([ups, ups[j:j + 1]]), dt)
                # some column of the row is beyond the tolerance
                assert not within_terms(dropped, ref, s, EPS[dt]).all(), (dt, j, "dropped")
                assert not within_terms(doubled, ref, s, EPS[dt]).all(), (dt, j, "doubled")


def test_a_reduction_in_another_order_agrees_and_a_dropped_term_does_not():
    rng = np.random.default_rng(1)
    for n in [50, 300, 3500]:
        t = (rng.standard_normal((20, n)) * 4).astype(np.float32)
        seq = np.zeros(20, np.float32)
        for i in range(n):  # in order in float32
            seq = seq + t[:, i]
        exact = t.astype(np.float64).sum(1).astype(np.float32)  # in double, rounded once
        s = np.abs(t).sum(1)
        assert within_terms(seq, exact, s, EPS["float32"]).all()
        dropped = (t.astype(np.float64).sum(1) - t[:, n // 2]).astype(np.float32)
        big = np.abs(t[:, n // 2]) > 4 * EPS["float32"] * s  # (a term smaller than that is not seen)
        assert big.any()
        assert not within_terms(dropped, exact, s, EPS["float32"])[big].any()


def test_nonfinite_results_must_match():
    s = np.array([np.inf, np.inf, 10.0, 10.0], np.float32)
    g = np.array([np.inf, np.nan, np.inf, 1.0], np.float16)
    c = np.array([np.inf, np.nan, 65504.0, 1.0], np.float16)
    assert within_terms(g, c, s, EPS["float16"]).tolist() == [True, True, False, True]
    assert not within_terms(np.array([np.inf]), np.array([-np.inf]), np.array([np.inf]), 1e-3).any()


def test_mismatches_applies_terms_through_its_entries():
    ref = np.array([1.0, 2.0, 3.0], np.float32)
    s = np.array([1e6, 1.0, 1.0], np.float32)  # the first output's terms are large: a wide tolerance
    near = ref + np.array([0.2, 0.0, 0.0], np.float32)
    far = ref + np.array([0.0, 1e-4, 0.0], np.float32)
    cpu = {("sum",): ("ok", ref), (TERMS, "sum"): ("ok", s), ("exact",): ("ok", ref)}

    def tol(key, dtype):
        return TERMS if key[0] == "sum" else None

    assert mismatches({**cpu, (TERMS, "sum"): ("ok", s * 2)}, cpu, tol) == []  # terms: not compared
    assert mismatches({**cpu, ("sum",): ("ok", near)}, cpu, tol) == []
    bad = mismatches({**cpu, ("sum",): ("ok", far)}, cpu, tol)
    assert [b[:2] for b in bad] == [(("sum",), "beyond tolerance")]
    bad = mismatches({**cpu, ("exact",): ("ok", near)}, cpu, tol)
    assert [b[:2] for b in bad] == [(("exact",), "not bit-exact")]
    # bfloat16 (the collector's bits): nans equal whatever their payloads; eps 2^-7
    nan1, nan2 = np.array([0x7FC0, 0x3F80], np.uint16), np.array([0xFFC1, 0x3F80], np.uint16)
    bf = {("sum",): ("bf16", nan1), (TERMS, "sum"): ("ok", np.array([1.0, 1.0], np.float32))}
    assert mismatches({**bf, ("sum",): ("bf16", nan2)}, bf, tol) == []
    one_ulp = np.array([0x7FC0, 0x3F81], np.uint16)  # 1 + 2^-7: within 4 eps of terms 1
    assert mismatches({**bf, ("sum",): ("bf16", one_ulp)}, bf, tol) == []


def test_complex_parts_have_their_own_bounds():
    # an infinite imaginary part leaves the real sum's bound finite (gpu_compare.magnitudes)
    eps = np.finfo(np.float32).eps
    s = np.array([complex(70000, np.inf)])
    ref = np.array([complex(69996.32, np.inf)], np.complex64)
    assert within_terms(np.array([complex(69996.31, np.inf)], np.complex64), ref, s, eps).all()
    assert not within_terms(np.array([complex(69990.0, np.inf)], np.complex64), ref, s, eps).any()
    assert not within_terms(np.array([complex(69996.32, -np.inf)], np.complex64), ref, s, eps).any()
    m = np.array(magnitudes(mx.array(np.array([complex(1, np.inf), complex(2, -3)], np.complex64))))
    assert m.tolist() == [complex(1, np.inf), complex(2, 3)]
