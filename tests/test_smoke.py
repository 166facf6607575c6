"""The package imports, builds arrays and evaluates a small graph."""
import subprocess
import sys
import os

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_lazy_graph_evaluates():
    a = mx.array([[1.0, 2.0], [3.0, 4.0]])
    b = a * 2 + 1
    assert b.tolist() == [[3.0, 5.0], [7.0, 9.0]]


def test_imports_without_numpy():
    code = "import sys; sys.modules['numpy'] = None; import mkpy; print(mkpy.array([1, 2]).tolist())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1, 2]"


def test_submodules_are_the_package_wrappers():
    # in a fresh interpreter, before anything imports mkpy.random explicitly
    code = ("import sys, mkpy as mx\n"
            "for n in ('random', 'fast', 'metal'):\n"
            "    m = getattr(mx, n)\n"
            "    assert m is sys.modules['mkpy.' + n], (n, m)\n"
            "    assert m.__name__ == 'mkpy.' + n and m.__file__.endswith(n + '.py'), m\n"
            "import mkpy.random\n"
            "from mkpy import fast, metal\n"
            "assert mkpy.random is mx.random and fast is mx.fast and metal is mx.metal\n"
            "mx.random.seed(3)\n"
            "assert mx.random.state[0].tolist() == [0, 3]\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr
