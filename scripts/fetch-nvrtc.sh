#!/bin/sh
# Fetches NVRTC (PyPI's nvidia-cuda-nvrtc wheel, CUDA 13) and unpacks it into
# mkpy/_nvrtc/, where mkpy's CUDA back-end looks for libnvrtc first after
# MKPY_NVRTC. NVRTC compiles without a GPU, so `make test` uses it to compile
# every kernel of the corpus for sm_80 and sm_90 (tests/test_cuda_compile.py).
# Nothing is built against it. Without network access it says so and stops;
# the tests that need it then skip with that reason.
set -e
dest="mkpy/_nvrtc"
[ -f "$dest/nvidia/cu13/lib/libnvrtc.so.13" ] && exit 0
PY="${PYTHON:-/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "nvidia-cuda-nvrtc>=13,<14" >"$tmp/log" 2>&1; then
    echo "mkpy: could not download nvidia-cuda-nvrtc (NVRTC) from PyPI; the CUDA compile tests will skip." >&2
    tail -3 "$tmp/log" >&2
    exit 0
fi
rm -rf "$dest.tmp"
"$PY" - "$tmp" "$dest.tmp" <<'PYEOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/nvidia_cuda_nvrtc-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("nvidia/")])
PYEOF
chmod -R u+rwX,go+rX "$dest.tmp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "mkpy: NVRTC unpacked into $dest"
