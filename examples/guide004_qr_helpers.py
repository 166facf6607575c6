"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "5.3 QR helpers".

The guide names two kernels of a file it does not show; these are the kernels as described:
`qr_col_dot` computes c = Q^T v (one thread per column) and `qr_update_vec` computes
v <- v - Q c (one thread per row), both taking an explicit `shape = [m, k]` buffer and the
header/body split. One projection step of Gram-Schmidt, checked against MLX ops.
"""
import sys

import mkpy as mx

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"
qr_col_dot = mx.fast.metal_kernel(
    name="qr_col_dot", input_names=["Q", "v", "shape"], output_names=["c"], header=HEADER,
    source=r"""
        uint j = thread_position_in_grid.x;
        uint m = shape[0];
        uint k = shape[1];
        if (j >= k) return;
        float acc = 0.0f;
        for (uint i = 0; i < m; i++) acc = fma(Q[i * k + j], v[i], acc);
        c[j] = acc;
    """)
qr_update_vec = mx.fast.metal_kernel(
    name="qr_update_vec", input_names=["Q", "c", "v", "shape"], output_names=["out"], header=HEADER,
    source=r"""
        uint i = thread_position_in_grid.x;
        uint m = shape[0];
        uint k = shape[1];
        if (i >= m) return;
        float acc = 0.0f;
        for (uint j = 0; j < k; j++) acc = fma(Q[i * k + j], c[j], acc);
        out[i] = v[i] - acc;
    """)


def ceil_mul(n, k):
    return (n + k - 1) // k * k


def project_out(Q, v):
    m, k = Q.shape
    shape = mx.array([m, k], dtype=mx.uint32)
    (c,) = qr_col_dot(inputs=[Q, v, shape], output_shapes=[(k,)], output_dtypes=[mx.float32],
                      grid=(ceil_mul(k, 32), 1, 1), threadgroup=(32, 1, 1))
    (v_new,) = qr_update_vec(inputs=[Q, c, v, shape], output_shapes=[(m,)], output_dtypes=[mx.float32],
                             grid=(ceil_mul(m, 256), 1, 1), threadgroup=(256, 1, 1))
    return c, v_new


m, k = 300, 12
Q = mx.random.normal((m, k), key=mx.random.key(0))
v = mx.random.normal((m,), key=mx.random.key(1))
c, v_new = project_out(Q, v)
c_ref = mx.sum(Q * v[:, None], axis=0)          # Q^T v
v_ref = v - mx.sum(Q * c_ref[None, :], axis=1)  # v - Q c
c_ok = mx.allclose(c, c_ref, rtol=1e-4, atol=1e-4).item()
v_ok = mx.allclose(v_new, v_ref, rtol=1e-4, atol=1e-3).item()
print("qr_col_dot matches sum(Q * v[:, None], axis=0):", c_ok)
print("qr_update_vec matches v - sum(Q * c, axis=1):", v_ok)

# With orthonormal columns (k columns of the identity), v_new is orthogonal to Q.
cols = mx.arange(k) * 7
Qo = (mx.arange(m)[:, None] == cols[None, :]).astype(mx.float32)
_, v_orth = project_out(Qo, v)
orth_ok = mx.max(mx.abs(mx.sum(Qo * v_orth[:, None], axis=0))).item() < 1e-6
print("after projecting out orthonormal Q, Q^T v_new == 0:", orth_ok)

ok = c_ok and v_ok and orth_ok
print("QR helper kernels match MLX ops:", ok)
sys.exit(0 if ok else 1)
