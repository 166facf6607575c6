#!/bin/sh
# MLX's Python package for the stand-in mode's tests (tests/test_as_mlx.py): a venv at
# $MKPY_TEST_MLX_VENV over the system site-packages (NumPy, pytest), with `mlx` from PyPI without
# extras and without dependencies: on Linux a 0.8 MB wheel holding mlx.nn, mlx.optimizers and
# mlx.utils, whose compiled mlx.core cannot load without `mlx-cpu` (not installed), so the tests
# run MLX's Python layers on mkpy only. Kept once made. Without network, pip or venv support, a
# note says so and those tests skip with the reason.
venv="$MKPY_TEST_MLX_VENV"
py="${PYTHON:-/usr/bin/python3}"
[ -z "$venv" ] && exit 0
# (the files are looked for: importing mlx.nn there needs mkpy's stand-in)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.util as u; assert u.find_spec('mlx') and u.find_spec('mlx.nn')" 2>/dev/null; then
    exit 0
fi
echo "Installing MLX's Python package for the stand-in tests into $venv (pip install --no-deps mlx)"
if "$py" -m venv --system-site-packages "$venv" && "$venv/bin/pip" install -q --timeout 20 --retries 1 --no-deps mlx; then
    exit 0
fi
echo "note: could not install MLX's Python package into $venv; tests/test_as_mlx.py skips its mlx.nn tests"
exit 0
