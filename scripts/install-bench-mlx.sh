#!/bin/sh
# MLX's CPU build for `make bench` (benchmarks only; mkpy and its tests never import it):
# a venv at $MKPY_BENCH_MLX_VENV over the system site-packages (NumPy), with `mlx[cpu]` from
# PyPI. Kept once made. Without network, pip or venv support, a note says the MLX columns
# read "mlx not installed", and the benchmarks run without them.
venv="$MKPY_BENCH_MLX_VENV"
py="${PYTHON:-/usr/bin/python3}"
[ -z "$venv" ] && exit 0
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mlx.core" 2>/dev/null; then
    exit 0
fi
echo "Installing MLX's CPU build for the benchmarks into $venv (pip install \"mlx[cpu]\")"
if "$py" -m venv --system-site-packages "$venv" && "$venv/bin/pip" install -q "mlx[cpu]" &&
    "$venv/bin/python" -c "import mlx.core"; then
    exit 0
fi
echo "note: could not install MLX's CPU build into $venv; the benchmarks run without its column"
exit 0
