"""Quick start: lazy arrays, then an MLX Metal kernel run on the CPU."""
import mkpy as mx

a = mx.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
b = mx.exp(a) * 2 + 1          # nothing is computed yet
mx.eval(b)                      # ... until now
print("a:", a)
print("exp(a) * 2 + 1:", b)
print("dtype promotion: int32 array + 1.5 ->", (mx.array([1, 2]) + 1.5).dtype)
print("device:", mx.device_info()["device_name"])

import math  # noqa: E402  (the check line tests/test_examples.py looks for)
expected = [[math.exp(v) * 2 + 1 for v in row] for row in a.tolist()]
ok = all(abs(g - e) <= 1e-5 * abs(e) for gr, er in zip(b.tolist(), expected) for g, e in zip(gr, er))
print("exp(a) * 2 + 1 matches Python's math.exp:", ok)
raise SystemExit(0 if ok else 1)
