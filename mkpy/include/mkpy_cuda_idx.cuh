// mkpy's GPU kernels for indexing and data movement (csrc/backend/cuda/
// ops_idx.c writes one small program per (kernel, element type) that
// includes this header; docs/design.md, "GPU indexing and data movement").
//
// Each kernel computes what the CPU evaluator of the same primitive computes
// (csrc/core/ops_index.c, ops_shape.c, ops_create.c, ops_reduce.c): gathers
// wrap a negative index once and clamp what is still out of range to the
// axis, scatters drop such updates; arg reductions keep the first of equal
// values and the first nan; scatters apply the CPU's expressions in the
// element's storage type. Where the CPU applies repeated updates in row order
// (a scatter whose index arrays repeat a target), assignment keeps the last
// row's value (a first pass records, per target, the last row that writes
// it) and integer and bool reductions are exact (their operations commute);
// float sums and products are applied atomically in the order the GPU
// meets them (within the dtype's tolerance of the CPU's order).
#ifndef MKPY_CUDA_IDX_CUH
#define MKPY_CUDA_IDX_CUH

#include "mkpy_cuda_ops.cuh"

namespace mkc {

#define MKC_IDX_MAXA 4  // index arrays of a gather or scatter on the GPU

// ------------------------------------------------------- indices
// t: the index dtype as u8, u16, u32, u64, i8, i16, i32, i64 (0..7); uint64
// values past int64's range read as its maximum (ops_index.c's load_index)
__device__ __forceinline__ i64 ld_index(u64 base, i64 i, int t) {
    switch (t) {
    case 0: return ((const u8 *)base)[i];
    case 1: return ((const u16 *)base)[i];
    case 2: return ((const u32 *)base)[i];
    case 3: {
        u64 v = ((const u64 *)base)[i];
        return v > 0x7fffffffffffffffull ? 0x7fffffffffffffffll : (i64)v;
    }
    case 4: return ((const i8 *)base)[i];
    case 5: return ((const i16 *)base)[i];
    case 6: return ((const i32 *)base)[i];
    default: return ((const i64 *)base)[i];
    }
}
// a negative index wraps once; gathers clamp the rest, scatters drop it (-1)
__device__ __forceinline__ i64 clamp_idx(i64 v, i64 n) {
    if (v < 0) v += n;
    return v < 0 ? 0 : v >= n ? n - 1 : v;
}
__device__ __forceinline__ i64 norm_idx(i64 v, i64 n) {
    if (v < 0) v += n;
    return v < 0 || v >= n ? -1 : v;
}

// the index arrays: device address, dtype code, the indexed axis' length and
// the target's stride along it
struct idx_set {
    u64 p[MKC_IDX_MAXA];
    i64 len[MKC_IDX_MAXA], st[MKC_IDX_MAXA];
    i32 type[MKC_IDX_MAXA];
};

// ------------------------------------------------------- gather
// o[offset over ost] = x[x0 + offset over xst + sum_k clamp(idx_k) * st_k]
// for every element of shape (merged dims). With N = 0 it is a strided
// copy: the dense copies of scatters and concatenate's pieces.
struct gat_args {
    i64 n, x0;
    i32 nd, pad_;
    i64 shape[MKC_MAX_NDIM], ost[MKC_MAX_NDIM], xst[MKC_MAX_NDIM];
    i64 ist[MKC_IDX_MAXA][MKC_MAX_NDIM];
    idx_set ix;
};

template <class E, int N> __device__ void gather(const gat_args &a, E *o, const E *x) {
    MKC_GRID_LOOP(i, a.n) {
        i64 oo = 0, xo = a.x0, io[N > 0 ? N : 1];
        for (int k = 0; k < N; k++) io[k] = 0;
        i64 r = i;
        for (int d = a.nd - 1; d >= 0 && r; d--) {
            i64 s = a.shape[d], c = r % s;
            r /= s;
            oo += c * a.ost[d];
            xo += c * a.xst[d];
            for (int k = 0; k < N; k++) io[k] += c * a.ist[k][d];
        }
        for (int k = 0; k < N; k++) xo += clamp_idx(ld_index(a.ix.p[k], io[k], a.ix.type[k]), a.ix.len[k]) * a.ix.st[k];
        o[oo] = x[xo];
    }
}

// ------------------------------------------------------- scatter
// ops_index.c's plan: `rows` rows over the outer dims (the sliced dims before
// the index dims, then the index arrays' broadcast shape B, nB elements), each
// moving a block of `post` elements (the sliced dims after). A row's target
// is t0 + its outer offset + sum_k idx_k * st_k (dropped when an index is out
// of range after one wrap); key numbers the distinct targets: (r / nB) * KA +
// sum_k idx_k * kmul_k.
struct sct_args {
    i64 rows, post, nB, t0, KA;
    i32 nout, npost;
    i64 oshape[MKC_MAX_NDIM], ots[MKC_MAX_NDIM], ous[MKC_MAX_NDIM];
    i64 ois[MKC_IDX_MAXA][MKC_MAX_NDIM];
    i64 pshape[MKC_MAX_NDIM], pts[MKC_MAX_NDIM], pus[MKC_MAX_NDIM];
    i64 kmul[MKC_IDX_MAXA];
    idx_set ix;
};

template <int N> __device__ __forceinline__ bool sc_row(const sct_args &a, i64 r, i64 &t, i64 &u, i64 &key) {
    i64 io[N > 0 ? N : 1];
    for (int k = 0; k < N; k++) io[k] = 0;
    t = a.t0;
    u = 0;
    i64 q = r;
    for (int d = a.nout - 1; d >= 0 && q; d--) {
        i64 s = a.oshape[d], c = q % s;
        q /= s;
        t += c * a.ots[d];
        u += c * a.ous[d];
        for (int k = 0; k < N; k++) io[k] += c * a.ois[k][d];
    }
    key = N > 0 ? (r / a.nB) * a.KA : 0;
    for (int k = 0; k < N; k++) {
        i64 v = norm_idx(ld_index(a.ix.p[k], io[k], a.ix.type[k]), a.ix.len[k]);
        if (v < 0) return false;
        t += v * a.ix.st[k];
        key += v * a.kmul[k];
    }
    return true;
}
__device__ __forceinline__ void sc_post(const sct_args &a, i64 q, i64 &t, i64 &u) {
    for (int d = a.npost - 1; d >= 0 && q; d--) {
        i64 s = a.pshape[d], c = q % s;
        q /= s;
        t += c * a.pts[d];
        u += c * a.pus[d];
    }
}

// the last row writing each target (row + 1; win starts zeroed)
template <int N> __device__ void scatter_win(const sct_args &a, u32 *win) {
    MKC_GRID_LOOP(r, a.rows) {
        i64 t, u, key;
        if (sc_row<N>(a, r, t, u, key)) atomicMax(win + key, (u32)(r + 1));
    }
}
// assignment (bytes); W: only the last row writing a target writes it
template <class E, int N, bool W> __device__ void scatter_set(const sct_args &a, E *o, const E *upd, const u32 *win) {
    MKC_GRID_LOOP(i, a.rows * a.post) {
        i64 r = i / a.post, t, u, key;
        if (!sc_row<N>(a, r, t, u, key)) continue;
        if (W && win[key] != (u32)(r + 1)) continue;
        sc_post(a, i - r * a.post, t, u);
        o[t] = upd[u];
    }
}

// ops_index.c's scatter expressions (x: the target's value, y: the update's)
#define MKC_SCATTER(name) struct s_##name { template <class S, class R> static __device__ __forceinline__ R ap(R x, R y)
MKC_SCATTER(sum) {
    if constexpr (is_cplx<R> || is_flt<R>) return x + y;
    else if constexpr (is_bool<R>) return x || y;
    else return (R)((u64)x + (u64)y);
} MKC_END
MKC_SCATTER(prod) {
    if constexpr (is_cplx<R> || is_flt<R>) return x * y;
    else if constexpr (is_bool<R>) return x && y;
    else return (R)((u64)x * (u64)y);
} MKC_END
MKC_SCATTER(max) {
    if constexpr (is_cplx<R>) return cgt(x, y) ? x : y;
    else if constexpr (is_bool<R>) return x || y;
    else return x > y ? x : y;
} MKC_END
MKC_SCATTER(min) {
    if constexpr (is_cplx<R>) return cgt(y, x) ? x : y;
    else if constexpr (is_bool<R>) return x && y;
    else return x < y ? x : y;
} MKC_END

template <class S, class W> __device__ __forceinline__ S from_bits(W w) {
    union {
        W w;
        S s;
    } u;
    u.w = w;
    return u.s;
}
template <class W, class S> __device__ __forceinline__ W to_bits(S s) {
    union {
        W w;
        S s;
    } u;
    u.w = 0;
    u.s = s;
    return u.w;
}
// *p = op(*p, y) in the storage type, atomically: a compare-and-swap loop on
// the element (8 bytes) or on the aligned 32-bit word holding it
template <class Op, class S> __device__ __forceinline__ void atomic_apply(S *p, rt<S> y) {
    if constexpr (sizeof(S) == 8) {
        u64 *w = (u64 *)p, old = *(volatile u64 *)w, seen;
        do {
            seen = old;
            S cur = from_bits<S>(seen), nv;
            store(&nv, Op::template ap<S>(load(&cur), y));
            old = atomicCAS(w, seen, to_bits<u64>(nv));
        } while (old != seen);
    } else {
        unsigned long long a = (unsigned long long)p;
        u32 *w = (u32 *)(a & ~3ull), sh = (u32)(a & 3) * 8;
        u32 mask = sizeof(S) == 4 ? 0xffffffffu : ((1u << (8 * sizeof(S))) - 1) << sh;
        u32 old = *(volatile u32 *)w, seen;
        do {
            seen = old;
            S cur = from_bits<S>((seen & mask) >> sh), nv;
            store(&nv, Op::template ap<S>(load(&cur), y));
            old = atomicCAS(w, seen, (seen & ~mask) | ((to_bits<u32>(nv) << sh) & mask));
        } while (old != seen);
    }
}
// a reduction: N = 0 has no repeated targets (a plain update); otherwise
// atomic (exact for integers and bools, whose operations commute)
template <class Op, class S, int N> __device__ void scatter_op(const sct_args &a, S *o, const S *upd) {
    MKC_GRID_LOOP(i, a.rows * a.post) {
        i64 r = i / a.post, t, u, key;
        if (!sc_row<N>(a, r, t, u, key)) continue;
        sc_post(a, i - r * a.post, t, u);
        if constexpr (N == 0) store(o + t, Op::template ap<S>(load(o + t), load(upd + u)));
        else atomic_apply<Op, S>(o + t, load(upd + u));
    }
}

// ------------------------------------------------------- put_along_axis
// One thread per line (the output with the axis dropped): the line's updates
// in order, as the CPU's loop (so repeated indices end as there).
struct pax_args {
    i64 lines, len, nax, oax, iax, uax;
    u64 idx;
    i32 nd, itype;
    i64 shape[MKC_MAX_NDIM], ost[MKC_MAX_NDIM], ist[MKC_MAX_NDIM], ust[MKC_MAX_NDIM];
};
__device__ __forceinline__ void pax_line(const pax_args &a, i64 l, i64 &oo, i64 &io, i64 &uo) {
    oo = io = uo = 0;
    for (int d = a.nd - 1; d >= 0 && l; d--) {
        i64 s = a.shape[d], c = l % s;
        l /= s;
        oo += c * a.ost[d];
        io += c * a.ist[d];
        uo += c * a.ust[d];
    }
}
template <class E> __device__ void put_axis_set(const pax_args &a, E *o, const E *upd) {
    MKC_GRID_LOOP(l, a.lines) {
        i64 oo, io, uo;
        pax_line(a, l, oo, io, uo);
        for (i64 j = 0; j < a.len; j++) {
            i64 k = norm_idx(ld_index(a.idx, io + j * a.iax, a.itype), a.nax);
            if (k >= 0) o[oo + k * a.oax] = upd[uo + j * a.uax];
        }
    }
}
template <class Op, class S> __device__ void put_axis_op(const pax_args &a, S *o, const S *upd) {
    MKC_GRID_LOOP(l, a.lines) {
        i64 oo, io, uo;
        pax_line(a, l, oo, io, uo);
        for (i64 j = 0; j < a.len; j++) {
            i64 k = norm_idx(ld_index(a.idx, io + j * a.iax, a.itype), a.nax);
            if (k < 0) continue;
            S *p = o + oo + k * a.oax;
            store(p, Op::template ap<S>(load(p), load(upd + uo + j * a.uax)));
        }
    }
}

// ------------------------------------------------------- pad
// ops_shape.c's pad_source per axis: the input index an output index reads,
// or -1 for the constant (mode: constant, edge, reflect, symmetric)
struct pad_args {
    i64 n;
    i32 nd, mode;
    i64 shape[MKC_MAX_NDIM], xst[MKC_MAX_NDIM], lo[MKC_MAX_NDIM], xn[MKC_MAX_NDIM];
};
__device__ __forceinline__ i64 pad_src(int mode, i64 j, i64 lo, i64 n) {
    i64 i = j - lo, p, m;
    if (i >= 0 && i < n) return i;
    if (mode == 0 || n == 0) return -1;
    switch (mode) {
    case 1: return i < 0 ? 0 : n - 1;
    case 2:
        if (n == 1) return 0;
        p = 2 * (n - 1);
        m = ((i % p) + p) % p;
        return m < n ? m : p - m;
    case 3:
        p = 2 * n;
        m = ((i % p) + p) % p;
        return m < n ? m : p - 1 - m;
    default: return -1;
    }
}
// cval: the constant's address, or 0 for zeros
template <class E> __device__ void pad(const pad_args &a, E *o, const E *x, const E *cval) {
    MKC_GRID_LOOP(i, a.n) {
        i64 r = i, xo = 0;
        bool in = true;
        for (int d = a.nd - 1; d >= 0; d--) {
            i64 s = a.shape[d], c = r % s;
            r /= s;
            i64 m = pad_src(a.mode, c, a.lo[d], a.xn[d]);
            if (m < 0) in = false;
            else xo += m * a.xst[d];
        }
        o[i] = in ? x[xo] : cval ? *cval : (E)0;
    }
}

// ------------------------------------------------------- fill
template <class E> __device__ void fill(i64 n, E *o, E v) {
    MKC_GRID_LOOP(i, n) o[i] = v;
}

// integer arange: start + i * step wrapping in the type (ops_create.c)
template <class S> __device__ void arange_int(i64 n, S *o, u64 s0, u64 st) {
    MKC_GRID_LOOP(i, n) o[i] = (S)(s0 + (u64)i * st);
}

// ------------------------------------------------------- scans
// ops_sort.c's scans: one thread per line, in the CPU's order, the running
// value rounded to the output's type at every step (the CPU reads it back
// from the output). c_<op>::step(a, v): a the running value (the output's
// compute type), v the next input; init: the exclusive scans' first value.
__device__ __forceinline__ bool clt(c64 a, c64 b) { return a.re < b.re || (a.re == b.re && a.im < b.im); }
// MLX's quiet nan for cummax/cummin (its float16 and bfloat16 types give 0)
template <class S> __device__ __forceinline__ float scan_qnan() {
    if constexpr (is_half<S>) return 0.0f;
    else return __int_as_float(0x7fc00000);
}
struct c_sum {
    template <class S, class A, class V> static __device__ __forceinline__ A step(A a, V v) {
        if constexpr (is_flt<A>) return a != a ? a : a + v;
        else if constexpr (is_cplx<A>) return a + v;
        else return (A)((u64)a + (u64)v);
    }
    template <class A> static __device__ __forceinline__ A init() {
        if constexpr (is_cplx<A>) return cx(0.0f, 0.0f);
        else return (A)0;
    }
};
struct c_prod {
    template <class S, class A, class V> static __device__ __forceinline__ A step(A a, V v) {
        if constexpr (is_flt<A>) return a != a ? a : a * v;
        else if constexpr (is_cplx<A>) return a * v;
        else if constexpr (is_bool<A>) return a && v;
        else return (A)((u64)a * (u64)v);
    }
    template <class A> static __device__ __forceinline__ A init() {
        if constexpr (is_cplx<A>) return cx(1.0f, 0.0f);
        else return (A)1;
    }
};
struct c_max {
    template <class S, class A, class V> static __device__ __forceinline__ A step(A a, V v) {
        if constexpr (is_flt<A>) return a != a || v != v ? scan_qnan<S>() : v < a ? a : v;
        else if constexpr (is_cplx<A>) return clt(v, a) ? a : v;
        else if constexpr (is_bool<A>) return a || v;
        else return v < a ? a : v;
    }
    template <class A> static __device__ __forceinline__ A init() {
        if constexpr (is_cplx<A>) return cx(-MKC_INF, -MKC_INF);
        else return lowest<A>();
    }
};
struct c_min {
    template <class S, class A, class V> static __device__ __forceinline__ A step(A a, V v) {
        if constexpr (is_flt<A>) return a != a || v != v ? scan_qnan<S>() : v < a ? v : a;
        else if constexpr (is_cplx<A>) return clt(v, a) ? v : a;
        else if constexpr (is_bool<A>) return a && v;
        else return v < a ? v : a;
    }
    template <class A> static __device__ __forceinline__ A init() {
        if constexpr (is_cplx<A>) return cx(MKC_INF, MKC_INF);
        else return highest<A>();
    }
};
struct scan_args {
    i64 lines, n, xax, oax;
    i32 nd, rev, incl, pad_;
    i64 shape[MKC_MAX_NDIM], xst[MKC_MAX_NDIM], ost[MKC_MAX_NDIM];
};
template <class Op, class SI, class SO> __device__ void scan_lines(const scan_args &a, SO *o, const SI *x) {
    typedef rt<SO> A;
    MKC_GRID_LOOP(l, a.lines) {
        i64 xo = 0, oo = 0, q = l;
        for (int d = a.nd - 1; d >= 0 && q; d--) {
            i64 s = a.shape[d], c = q % s;
            q /= s;
            xo += c * a.xst[d];
            oo += c * a.ost[d];
        }
        i64 p = a.rev ? a.n - 1 : 0, dp = a.rev ? -1 : 1;
        SO *op = o + oo + p * a.oax;
        store(op, a.incl ? to<A>(load(x + xo + p * a.xax)) : Op::template init<A>());
        A acc = load(op);
        i64 px = a.incl ? p + dp : p;
        for (i64 j = 1; j < a.n; j++, px += dp) {
            op += dp * a.oax;
            store(op, Op::template step<SO>(acc, load(x + xo + px * a.xax)));
            acc = load(op);
        }
    }
}

// the host's copies of the argument blocks (csrc/backend/cuda/ops_idx.c)
static_assert(sizeof(gat_args) == 1928 && sizeof(sct_args) == 2752 && sizeof(pax_args) == 1088 &&
                  sizeof(pad_args) == 1040 && sizeof(scan_args) == 816,
              "ops_idx.c's argument blocks");

// ------------------------------------------------------- argmax, argmin
// ops_reduce.c's rule: scanning in order, x replaces the best v unless v is
// a nan, when x is better or a nan: the first nan, else the first of the
// best values. arg_beats orders (value, index) pairs the same way for any
// order of combination.
template <bool MAX, class R> __device__ __forceinline__ bool arg_gt(R a, R b) {
    if constexpr (MAX) return gt(a, b);
    else return gt(b, a);
}
template <bool MAX, class R> __device__ __forceinline__ bool arg_take(R v, R x) {
    return !nan_of(v) && (arg_gt<MAX>(x, v) || nan_of(x));
}
template <bool MAX, class R> __device__ __forceinline__ bool arg_beats(R bv, u32 bi, R av, u32 ai) {
    bool bn = nan_of(bv), an = nan_of(av);
    if (bn || an) return bn && (!an || bi < ai);
    return arg_gt<MAX>(bv, av) || (!arg_gt<MAX>(av, bv) && bi < ai);
}
template <class R> struct arg_acc {
    R v;
    u32 i, set;
};

template <bool MAX, class S> __device__ void arg_threads(const red_args &a, u32 *o, const S *x) {
    typedef rt<S> R;
    MKC_GRID_LOOP(k, a.K) {
        const S *xk = x + dim_off(k, a.nk, a.kshape, a.kst);
        R v = load(xk);
        u32 vi = 0;
        for (i64 r = 1; r < a.R; r++) {
            R y = load(xk + dim_off(r, a.nr, a.rshape, a.rst));
            if (arg_take<MAX>(v, y)) {
                v = y;
                vi = (u32)r;
            }
        }
        o[k] = vi;
    }
}
template <bool MAX, class S> __device__ void arg_blocks(const red_args &a, u32 *o, const S *x, void *part) {
    typedef rt<S> R;
    __shared__ R sv[MKC_RED_THREADS];
    __shared__ u32 si[MKC_RED_THREADS], ss[MKC_RED_THREADS];
    const int t = threadIdx.x;
    for (i64 b = blockIdx.x; b < a.K * a.nchunk; b += gridDim.x) {
        i64 k = b / a.nchunk, c = b % a.nchunk;
        const S *xk = x + dim_off(k, a.nk, a.kshape, a.kst);
        i64 r0 = c * a.chunk, r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
        R v = R();
        u32 vi = 0, set = 0;
        for (i64 r = r0 + t; r < r1; r += blockDim.x) {
            R y = load(xk + dim_off(r, a.nr, a.rshape, a.rst));
            if (!set || arg_take<MAX>(v, y)) {
                v = y;
                vi = (u32)r;
                set = 1;
            }
        }
        sv[t] = v;
        si[t] = vi;
        ss[t] = set;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (t < s && ss[t + s] && (!ss[t] || arg_beats<MAX>(sv[t + s], si[t + s], sv[t], si[t]))) {
                sv[t] = sv[t + s];
                si[t] = si[t + s];
                ss[t] = 1;
            }
            __syncthreads();
        }
        if (t == 0) {
            if (a.nchunk == 1) {
                o[k] = ss[0] ? si[0] : 0;
            } else {
                arg_acc<R> *p = (arg_acc<R> *)part + b;
                p->v = sv[0];
                p->i = si[0];
                p->set = ss[0];
            }
        }
        __syncthreads();
    }
}
template <bool MAX, class S> __device__ void arg_parts(const red_args &a, u32 *o, const void *part) {
    typedef rt<S> R;
    MKC_GRID_LOOP(k, a.K) {
        const arg_acc<R> *p = (const arg_acc<R> *)part + k * a.nchunk;
        arg_acc<R> best = p[0];
        for (int c = 1; c < a.nchunk; c++)
            if (p[c].set && (!best.set || arg_beats<MAX>(p[c].v, p[c].i, best.v, best.i))) best = p[c];
        o[k] = best.set ? best.i : 0;
    }
}

}  // namespace mkc

#endif
