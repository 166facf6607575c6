"""Guide 001 (MLX Metal Kernel Development Guide): "Complex64 Limitations".

The workaround runs as written: element-wise complex64 arithmetic is built in, so there is no
need for a custom complex-multiply kernel. The guide's list of GPU gaps is about Metal
back-ends of 2025 and cannot be checked on a CPU; on MLX's CPU back-end (which mkpy follows)
mx.sqrt of complex64 works, and so it does here.
"""
import cmath
import sys

import mkpy as mx

a = [1 + 2j, -3 + 0.5j, 0.25 - 1j, 2j]
b = [2 - 1j, 1 + 1j, -4 + 0j, 0.5 + 0.5j]
a_complex = mx.array(a, dtype=mx.complex64)
b_complex = mx.array(b, dtype=mx.complex64)

# Skip custom complex multiply kernel
# Just use MLX's built-in (works on GPU for basic ops)
result = mx.multiply(a_complex, b_complex)

expected = [p * q for p, q in zip(a, b)]
mul_ok = result.dtype == mx.complex64 and all(abs(r - e) < 1e-6 for r, e in zip(result.tolist(), expected))
sqrt_ok = all(abs(r - cmath.sqrt(v)) < 1e-6 for r, v in zip(mx.sqrt(a_complex).tolist(), a))
print("mx.multiply(a_complex, b_complex):", result)
print("complex64 multiply matches Python complex arithmetic:", mul_ok)
print("complex64 sqrt matches cmath.sqrt:", sqrt_ok)
ok = mul_ok and sqrt_ok
print("complex64 workaround runs as documented:", ok)
sys.exit(0 if ok else 1)
