"""Checks run on every rank under mpirun (tests/test_distributed_mpi.py starts them).

    mpirun -np N python tests/mpi/checks.py [--mlx SITE] [--training-only]

Each rank prints "CHECKS rank=R passed=P" at the end, or a traceback and exits 1. All checks of
a launch run in one process so the suite pays mpirun's start-up once per launch.
"""
import socket
import sys

import numpy as np

import mkpy as mx

D = mx.distributed
world = D.init(strict=True, backend="mpi")
R, N = world.rank(), world.size()
passed = 0
ALL_DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32, mx.int64,
              mx.float16, mx.bfloat16, mx.float32, mx.float64, mx.complex64]
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 3), (1031,)]


def ok():
    global passed
    passed += 1


def np_dtype(dt):
    return {mx.bfloat16: np.float32}.get(dt, None)


def rank_values(shape, dt, r, seed):
    """Rank r's input: small integers (exact in every dtype), different per rank."""
    rng = np.random.default_rng(seed * 1000 + r)
    v = rng.integers(-3 if dt not in (mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.bool_) else 0, 4, size=shape)
    if dt == mx.complex64:
        v = v + 1j * rng.integers(-3, 4, size=shape)
    return v


def as_mx(v, dt):
    return mx.array(v).astype(dt) if dt != mx.complex64 else mx.array(v.astype(np.complex64))


def to_np(a):
    a = a.astype(mx.float32) if a.dtype == mx.bfloat16 else a
    return np.array(a)


def expect_equal(got, want, what):
    got = np.asarray(got)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"rank {R}: {what}: got {got!r}, want {want!r}")
    ok()


def reduce_ref(vals, op, dt):
    """The reduction MLX's MPI back-end gives for these exact small integers."""
    if dt == mx.bool_:
        b = [v != 0 for v in vals]
        return np.logical_and.reduce(b) if op == "min" else np.logical_or.reduce(b)
    if dt == mx.complex64:  # ordered by (real, imag), as MLX's complex64_t
        keys = [v.real * 1000 + v.imag for v in vals]
        if op == "sum":
            return sum(vals)
        idx = np.argmax(keys, axis=0) if op == "max" else np.argmin(keys, axis=0)
        return np.choose(idx, vals)
    if op == "sum":
        out = sum(vals)
    else:
        out = (np.maximum if op == "max" else np.minimum).reduce(vals)
    return out


def check_group(g, label):
    r, n = g.rank(), g.size()
    fns = {"sum": D.all_sum, "max": D.all_max, "min": D.all_min}
    # every collective by every dtype, odd and empty shapes; all queued, one eval
    pending = []
    for di, dt in enumerate(ALL_DTYPES):
        for si, shape in enumerate(SHAPES):
            seed = di * 100 + si
            vals = [rank_values(shape, dt, k, seed) for k in range(n)]
            x = as_mx(vals[r], dt)
            cast = (lambda v, dt=dt: to_np(as_mx(v, dt)))
            for op, fn in fns.items():
                pending.append((fn(x, group=g, stream=mx.cpu), cast(reduce_ref(vals, op, dt)), f"{label} {op} {dt} {shape}"))
            want = np.concatenate([cast(v) if shape else cast(v)[None] for v in vals])
            pending.append((D.all_gather(x, group=g, stream=mx.cpu), want, f"{label} all_gather {dt} {shape}"))
            if dt != mx.bool_:
                sshape = (n * (shape[0] if shape else 1),) + shape[1:]
                svals = [rank_values(sshape, dt, k, seed + 7) for k in range(n)]
                tot = cast(reduce_ref(svals, "sum", dt))
                blk = sshape[0] // n
                pending.append((D.sum_scatter(as_mx(svals[r], dt), group=g, stream=mx.cpu), tot[r * blk:(r + 1) * blk],
                                f"{label} sum_scatter {dt} {sshape}"))
    mx.eval([p[0] for p in pending])
    for got, want, what in pending:
        expect_equal(to_np(got), want, what)
    # a non-contiguous input
    base = mx.arange(24, dtype=mx.float32).reshape(4, 6) + r
    expect_equal(to_np(D.all_sum(base.T[::2], group=g)), sum(np.arange(24.0).reshape(4, 6).T[::2] + k for k in range(n)),
                 f"{label} all_sum of a strided view")
    expect_equal(to_np(D.all_gather(base[:, 1::3], group=g)),
                 np.concatenate([np.arange(24.0).reshape(4, 6)[:, 1::3] + k for k in range(n)]), f"{label} strided gather")
    # float16 / bfloat16 sums round in their own arithmetic, element by element
    h = mx.array([1.0 + 2 ** -10], dtype=mx.float16) if r == 0 else mx.array([2 ** -11], dtype=mx.float16)
    if n == 2:
        want = (np.float16(1.0 + 2 ** -10) + np.float16(2 ** -11)).astype(np.float16)
        expect_equal(np.array(D.all_sum(h, group=g)), np.array([want]), f"{label} float16 rounding")


def check_errors():
    try:
        D.sum_scatter(mx.zeros((N + 1,) if N > 1 else (3,)))
        raise AssertionError("sum_scatter of an indivisible shape")
    except ValueError as e:
        assert "[sum_scatter] Invalid shape" in str(e), e
    ok()
    for bad in (-1, N):
        for f in (lambda: D.send(mx.zeros(2), bad), lambda: D.recv((2,), mx.float32, bad)):
            try:
                f()
                raise AssertionError("bad peer")
            except ValueError as e:
                assert "Invalid destination" in str(e) or "Invalid source" in str(e), e
            ok()
    assert D.init() is not None and D.init().size() == N and D.init(backend="any").rank() == R
    assert D.is_available() and D.is_available("mpi") and not D.is_available("ring")
    ok()


def check_send_recv():
    # a ring: each rank sends to the next and receives from the previous, many dtypes
    nxt, prv = (R + 1) % N, (R - 1) % N
    for dt in ALL_DTYPES:
        for shape in [(0,), (5,), (3, 4)]:
            x = as_mx(rank_values(shape, dt, R, 5), dt)
            want = to_np(as_mx(rank_values(shape, dt, prv, 5), dt))
            if R % 2 == 0:
                s = D.send(x, nxt, stream=mx.cpu)
                mx.eval(s)
                expect_equal(to_np(s), to_np(x), "send returns x")
                y = D.recv(shape, dt, prv, stream=mx.cpu)
            else:
                y = D.recv_like(x, prv, stream=mx.cpu)
                mx.eval(y)
                mx.eval(D.send(x, nxt, stream=mx.cpu))
            expect_equal(to_np(y), want, f"recv {dt} {shape}")
    # recv and an unrelated computation in one eval, as MLX's test
    if N >= 2 and R < 2:
        z = mx.ones((5, 5)) + 2
        y = D.send(mx.full((4,), 3.0), 1) if R == 0 else D.recv((4,), mx.float32, 0)
        mx.eval(z, y)
        expect_equal(np.array(y), np.full(4, 3.0, np.float32), "recv with other work")


def check_transforms():
    x = mx.arange(6, dtype=mx.float32) * (R + 1)
    # grads through all_sum: the cotangent passes through (each rank's own), as MLX
    g = mx.grad(lambda a: (D.all_sum(a) * mx.arange(6, dtype=mx.float32)).sum())(x)
    expect_equal(np.array(g), np.arange(6, dtype=np.float32), "grad of all_sum")
    g = mx.grad(lambda a: D.all_sum(a * a).sum())(x)
    expect_equal(np.array(g), 2 * np.array(x), "grad of all_sum(x*x)")
    # grad of all_gather: this rank's slice of the cotangent
    w = mx.arange(6 * N, dtype=mx.float32)
    g = mx.grad(lambda a: (D.all_gather(a) * w).sum())(x)
    expect_equal(np.array(g), np.arange(6.0 * R, 6.0 * R + 6, dtype=np.float32), "grad of all_gather")
    s = mx.array(float(R))
    g = mx.grad(lambda a: (D.all_gather(a) * mx.arange(N, dtype=mx.float32)).sum())(s)
    expect_equal(np.array(g), np.array(float(R), np.float32), "grad of a scalar all_gather")
    # jvp: the tangent is reduced again
    _, t = mx.jvp(lambda a: D.all_sum(a), [x], [mx.ones(6)])
    expect_equal(np.array(t[0]), np.full(6, float(N), np.float32), "jvp of all_sum")
    # vmap: the op on the batched input, batch axis kept
    xb = mx.arange(12, dtype=mx.float32).reshape(2, 6) + R
    v = mx.vmap(D.all_sum)(xb)
    expect_equal(np.array(v), sum(np.arange(12.0).reshape(2, 6) + k for k in range(N)).astype(np.float32), "vmap")
    # compile
    f = mx.compile(lambda a: D.all_sum(a * 2) + 1)
    for _ in range(2):
        expect_equal(np.array(f(x)), sum(2 * np.arange(6.0) * (k + 1) for k in range(N)) + 1, "compile")


def mlp_params(seed):
    rng = np.random.default_rng(seed)
    return {"w1": mx.array(rng.normal(0, 0.5, (8, 16)).astype(np.float32)), "b1": mx.zeros((16,)),
            "w2": mx.array(rng.normal(0, 0.5, (16, 3)).astype(np.float32)), "b2": mx.zeros((3,))}


def mlp_loss(p, x, y, total):
    h = mx.maximum(x @ p["w1"] + p["b1"], 0)
    out = h @ p["w2"] + p["b2"]
    return ((out - y) ** 2).sum() / total


def check_training():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(64, 8)).astype(np.float32)
    Y = rng.normal(size=(64, 3)).astype(np.float32)
    grad_fn = mx.grad(mlp_loss)
    # one process, whole batch
    ref = mlp_params(3)
    for _ in range(5):
        gr = grad_fn(ref, mx.array(X), mx.array(Y), 64)
        ref = {k: ref[k] - 0.1 * gr[k] for k in ref}
    mx.eval(ref)
    # data parallel: rank r trains on its rows, the gradients are summed
    par = mlp_params(3)
    rows = np.array_split(np.arange(64), N)[R]
    xs, ys = mx.array(X[rows]), mx.array(Y[rows])
    for step in range(5):
        g = grad_fn(par, xs, ys, 64)
        gs = {k: D.all_sum(v) for k, v in g.items()}
        if step == 0 and N == 2:
            # bitwise: the all-reduce of two gradients is their sum (either order)
            if R == 0:
                mx.eval([D.send(v, 1) for v in g.values()])
                other = {k: D.recv_like(v, 1) for k, v in g.items()}
            else:
                other = {k: D.recv_like(v, 0) for k, v in g.items()}
                mx.eval(list(other.values()))
                mx.eval([D.send(v, 0) for v in g.values()])
            for k in g:
                expect_equal(np.array(gs[k]), np.array(g[k] + other[k]), f"all_sum of gradients {k} bitwise")
        par = {k: par[k] - 0.1 * gs[k] for k in par}
        mx.eval(par)
    for k in ref:
        err = np.abs(np.array(par[k]) - np.array(ref[k])).max()
        if err > 1e-6:
            raise AssertionError(f"rank {R}: data-parallel {k} differs from one process by {err}")
        ok()


def check_splits():
    check_group(world, "world")
    if N >= 2:
        sub = world.split(R % 2)
        assert sub.size() == (N + 1 - R % 2) // 2 and sub.rank() == R // 2, (sub.size(), sub.rank())
        ok()
        if sub.size() > 1:
            check_group(sub, f"split({R % 2})")
        else:
            expect_equal(np.array(D.all_sum(mx.arange(3), group=sub)), np.arange(3, dtype=np.int32), "group of one")
        # key reverses the order
        rev = world.split(0, key=N - 1 - R)
        assert rev.rank() == N - 1 - R
        expect_equal(np.array(D.all_gather(mx.array([R]), group=rev)), np.arange(N)[::-1].astype(np.int32), "key order")
        # mixed groups in one graph, as MLX's test_mixed
        y = D.all_sum(mx.ones((1, 4)) * R, group=sub)
        z = D.all_gather(y, group=world)
        want = np.concatenate([np.full((1, 4), sum(k for k in range(N) if k % 2 == q % 2), np.float32)
                               for q in range(N)])
        expect_equal(np.array(z), want, "mixed groups")


def check_mlx_layers(site):
    """MLX's pure-Python nn (average_gradients, the sharded linear layers) over mkpy."""
    import types
    mlx = types.ModuleType("mlx")
    mlx.__path__ = [site + "/mlx"]
    sys.modules["mlx"] = mlx
    sys.modules["mlx.core"] = mx
    mlx.core = mx
    import mlx.nn as nn
    from mlx.nn.layers.distributed import shard_linear
    from mlx.nn.utils import average_gradients
    grads = {"a": mx.ones((3,)) * (R + 1), "b": [mx.full((2, 2), float(R))]}
    avg = average_gradients(grads)
    mx.eval(avg)
    expect_equal(np.array(avg["a"]), np.full(3, sum(range(1, N + 1)) / N, np.float32), "average_gradients")
    expect_equal(np.array(avg["b"][0]), np.full((2, 2), sum(range(N)) / N, np.float32), "average_gradients list")
    mx.random.seed(0xF0F0)
    lin = nn.Linear(16 * N, 32 * N)
    x = mx.random.normal((4, 16 * N))
    y = lin(x)
    y1 = shard_linear(lin, "all-to-sharded")(x)
    part = slice(R * 32, (R + 1) * 32)
    assert mx.allclose(y[:, part], y1, atol=1e-5, rtol=1e-5).item()
    ok()
    cols = slice(R * 16, (R + 1) * 16)
    y2 = shard_linear(lin, "sharded-to-all")(x[:, cols])
    assert mx.allclose(y, y2, atol=1e-5, rtol=1e-4).item()
    ok()


def main():
    if "--training-only" in sys.argv:  # the two-namespace run
        check_training()
        print(f"CHECKS rank={R} size={N} passed={passed} host={socket.gethostname()}", flush=True)
        return
    check_errors()
    check_splits()
    check_send_recv()
    check_transforms()
    check_training()
    if "--mlx" in sys.argv:
        check_mlx_layers(sys.argv[sys.argv.index("--mlx") + 1])
    print(f"CHECKS rank={R} size={N} passed={passed}", flush=True)


with mx.stream(mx.cpu):  # float64 needs the CPU stream, as on a Mac; MLX's MPI runs on it too
    main()
