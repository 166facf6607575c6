"""The stand-in mode (mkpy.as_mlx): `import mlx.core` gives mkpy.

Each check runs in a child interpreter, as the mode changes the process (an import hook, dtype
reprs printing mlx.core). MLX's own compiled core is never imported: the children hide any
installed `mlx` package, except the venv of MLX's Python package without its core
(MKPY_TEST_MLX_VENV, made by `make test`), whose tests skip with the reason where it is missing."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# keeps any installed `mlx` package out of the child's sys.path
HIDE_MLX = textwrap.dedent("""
    import os, sys
    sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or '.', 'mlx'))]
""")


def run(code, *, python=sys.executable, args=(), env=None, hide_mlx=True, cwd=None):
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.pop("MKPY_AS_MLX", None)
    e.update(env or {})
    cmd = [python, *args] if code is None else [python, "-c", (HIDE_MLX if hide_mlx else "") + textwrap.dedent(code)]
    return subprocess.run(cmd, env=e, cwd=cwd, capture_output=True, text=True, timeout=300)


def ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


CHECKS = """
    import sys, importlib
    import mlx.core as mx
    import mkpy
    assert mx is mkpy and sys.modules["mlx.core"] is mkpy
    import mlx.core.fast, mlx.core.linalg, mlx.core.random, mlx.core.fft
    import mlx.core.distributed, mlx.core.metal, mlx.core.cuda
    from mlx.core import fast, linalg
    assert fast is mkpy.fast and linalg is mkpy.linalg and mlx.core.random is mkpy.random
    assert mlx.core.cuda is mkpy.cuda and mlx.core.metal is mkpy.metal
    import mlx
    assert mlx.core is mkpy
    # what MLX's tests compare; mkpy stays itself for code that checks for it
    assert str(mx.float32) == "mlx.core.float32" and repr(mx.bool_) == "mlx.core.bool", str(mx.float32)
    assert mkpy.__name__ == "mkpy" and mkpy.__spec__.name == "mkpy"
    assert repr(mx.array([1, 2])) == "array([1, 2], dtype=int32)"
    try:
        mx.array(1.0) + "a"
    except ValueError as e:
        assert "on an mlx.core.array and str" in str(e), e
    else:
        raise AssertionError("no error")
    try:
        import mlx.core.nosuchmodule
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("imported")
    print("ok")
"""


def test_as_mlx_call_maps_mlx_core_and_its_submodules():
    assert ok(run("import mkpy; mkpy.as_mlx(); mkpy.as_mlx()\n" + textwrap.dedent(CHECKS))) == "ok\n"


def test_environment_variable_at_import_mkpy():
    assert ok(run("import mkpy\n" + textwrap.dedent(CHECKS), env={"MKPY_AS_MLX": "1"})) == "ok\n"
    # off without it: dtypes print as mkpy's and mlx is not importable here
    out = ok(run("""
        import mkpy
        print(str(mkpy.float32))
        try:
            import mlx.core
        except ImportError:
            print("no mlx")
    """))
    assert out == "mkpy.float32\nno mlx\n"


def test_dlpack_device_is_metal_as_mlx_with_metal():
    # MLX reports Metal (8) whenever mx.metal.is_available(); its tests check the pair. Capsules
    # hold host memory in both modes, and asking for the CPU (MLX's tests do) works.
    out = ok(run("""
        import numpy as np
        import mkpy
        a = mkpy.array([1.0, 2.0])
        print(a.__dlpack_device__(), np.from_dlpack(a).tolist())
        mkpy.as_mlx()
        import mlx.core as mx
        b = mx.array([[1, 2], [3, 4]]).T
        assert mx.metal.is_available()
        print(b.__dlpack_device__(), a.__dlpack_device__(), np.from_dlpack(b).tolist())
        print(np.from_dlpack(type("Cpu", (), {"__dlpack_device__": lambda s: (1, 0),
              "__dlpack__": lambda s, **k: b.__dlpack__(dl_device=(1, 0))})()).tolist())
        print(mx.from_dlpack(b).tolist())
        for dev in ((8, 0), (2, 0), (4, 0)):
            try:
                b.__dlpack__(dl_device=dev)
            except BufferError as e:
                print(e)
    """))
    assert out.splitlines() == [
        "(1, 0) [1.0, 2.0]", "(8, 0) (8, 0) [[1, 3], [2, 4]]", "[[1, 3], [2, 4]]", "[[1, 3], [2, 4]]",
        "Metal DLPack export is not available: mkpy's arrays are in host memory (export them with "
        "dl_device=(1, 0)).", "CUDA DLPack export is not supported.",
        "Cannot export mlx array to requested DLPack device."]


def test_without_mlx_package_nn_names_pip_install_mlx():
    out = ok(run("""
        import mkpy
        mkpy.as_mlx()
        import mlx.core
        try:
            import mlx.nn
        except ModuleNotFoundError as e:
            print(e)
    """))
    assert "pip install mlx" in out and "mlx.nn" in out


def test_refuses_once_mlx_own_core_is_imported():
    out = ok(run("""
        import sys, types
        sys.modules["mlx.core"] = types.ModuleType("mlx.core")  # as MLX's compiled core would be
        import mkpy
        try:
            mkpy.as_mlx()
        except RuntimeError as e:
            print(e)
    """))
    assert "already" in out


def test_run_script_and_module(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys
        import mlx.core as mx
        print(__name__, sys.argv[1:], mx.sum(mx.array([1, 2, 3])).item(), str(mx.int8))
    """))
    r = run(None, args=["-m", "mkpy", "run", str(script), "a", "--b"])
    assert ok(r) == "__main__ ['a', '--b'] 6 mlx.core.int8\n"
    (tmp_path / "progmod.py").write_text(script.read_text())
    r = run(None, args=["-m", "mkpy", "run", "-m", "progmod", "x"], env={"PYTHONPATH": ROOT + os.pathsep + str(tmp_path)})
    assert ok(r) == "__main__ ['x'] 6 mlx.core.int8\n"
    r = run(None, args=["-m", "mkpy", "run"])
    assert r.returncode == 2 and "usage" in r.stderr


def test_pytest_plugin_is_on_before_conftest(tmp_path):
    (tmp_path / "conftest.py").write_text("import mlx.core as mx\nCONF = mx.array([2.0])\n")
    (tmp_path / "test_x.py").write_text(textwrap.dedent("""
        import mlx.core as mx
        import mkpy

        def test_x():
            assert mx is mkpy and str(mx.float32) == "mlx.core.float32"
            assert (mx.array([1.0]) * 3).item() == 3.0
    """))
    r = run(None, args=["-m", "pytest", "-q", "-p", "mkpy.as_mlx", "-p", "no:cacheprovider", str(tmp_path)],
            cwd=str(tmp_path))
    out = ok(r)
    assert "1 passed" in out


def mlx_venv_python():
    venv = os.environ.get("MKPY_TEST_MLX_VENV", "")
    py = os.path.join(venv, "bin", "python")
    # a venv whose `pip install mlx` failed (no PyPI) exists without the package
    has_nn = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "mlx", "nn", "__init__.py"))
    if not venv or not os.path.exists(py) or not has_nn:
        pytest.skip("no venv with MLX's Python package (MKPY_TEST_MLX_VENV, made by `make test`; "
                    "needs PyPI): mlx.nn through the stand-in is not tested")
    return py


def test_mlx_nn_optimizers_utils_from_the_mlx_package_run_on_mkpy():
    out = ok(run("""
        import sys
        import mkpy
        mkpy.as_mlx()
        import mlx.core as mx
        import mlx.nn as nn
        import mlx.optimizers as optim
        from mlx.utils import tree_flatten
        assert mx is mkpy and sys.modules["mlx.core"] is mkpy
        # MLX's compiled core (mlx/core.*.so in the wheel) is never loaded
        assert not any(getattr(m, "__file__", "") and m.__file__.endswith(".so") and "mlx" in m.__name__
                       for m in list(sys.modules.values())), [m for m in sys.modules if "mlx" in m]
        mx.random.seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = optim.Adam(learning_rate=0.05)
        x = mx.random.normal((32, 4))
        y = x.sum(axis=1, keepdims=True)
        loss_fn = lambda m: nn.losses.mse_loss(m(x), y)
        step = nn.value_and_grad(model, loss_fn)
        first = None
        for _ in range(60):
            loss, grads = step(model)
            opt.update(model, grads)
            mx.eval(model.parameters(), opt.state)
            first = first if first is not None else loss.item()
        assert loss.item() < first / 4, (first, loss.item())
        print(len(tree_flatten(model.parameters())))
    """, python=mlx_venv_python(), hide_mlx=False))
    assert out == "4\n"


def test_pth_file_of_the_wheel_turns_the_mode_on_at_start_up(tmp_path):
    # the wheel installs mkpy_as_mlx.pth into site-packages (setup.py's BuildPy); addsitedir runs it
    # as the interpreter's start-up does
    (tmp_path / "mkpy_as_mlx.pth").write_text(open(os.path.join(ROOT, "mkpy_as_mlx.pth")).read())
    code = """
        import site, sys
        site.addsitedir(%r)
        print("mkpy" in sys.modules)
        import mlx.core as mx
        print(mx.__name__, str(mx.float16))
    """ % str(tmp_path)
    assert ok(run(code, env={"MKPY_AS_MLX": "1"})) == "True\nmkpy mlx.core.float16\n"
    r = run(code)
    assert r.stdout == "False\n" and "No module named 'mlx'" in r.stderr
