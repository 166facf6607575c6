#!/bin/sh
# Fetches NVRTC (PyPI's nvidia-cuda-nvrtc wheel, CUDA 13) and unpacks it into
# mkpy/_nvrtc/, where mkpy's CUDA back-end looks for libnvrtc first after
# MKPY_NVRTC. NVRTC compiles without a GPU, so `make test` uses it to compile
# every kernel of the corpus for sm_80 and sm_90 (tests/test_cuda_compile.py).
# Nothing is built against it.
#
# For the tests only, it also unpacks the CUDA runtime headers (cuda_fp16.h,
# cooperative_groups.h, ...: nvidia-cuda-runtime) and CCCL (cuda/std/...:
# nvidia-cuda-cccl) into mkpy/_nvrtc/nvidia/cu13/include: MLX's
# mx.fast.cuda_kernel includes them around the kernels that
# mkpy.cuda.metal_kernel translates, and tests/test_mlx_cuda.py compiles those
# programs as MLX does. mkpy itself never includes them.
#
# Without network access it says so and stops; the tests that need these then
# skip with that reason.
set -e
dest="mkpy/_nvrtc"
PY="${PYTHON:-/usr/bin/python3}"

# fetch WHEEL-NAME REQUIREMENT FILE-IT-PROVIDES [PART]: download the wheel and unpack its nvidia/ folder
# (only the paths containing PART, when given) into $dest
fetch() {
    [ -f "$dest/$3" ] && return 0
    tmp=$(mktemp -d)
    if ! "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$2" >"$tmp/log" 2>&1; then
        echo "mkpy: could not download $1 from PyPI; the tests that need it will skip." >&2
        tail -3 "$tmp/log" >&2
        rm -rf "$tmp"
        return 0
    fi
    "$PY" - "$tmp" "$dest.tmp" "$1" "${4:-}" <<'PYEOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/" + sys.argv[3].replace("-", "_") + "-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("nvidia/") and sys.argv[4] in n])
PYEOF
    rm -rf "$tmp"
    mkdir -p "$dest"
    cp -R "$dest.tmp/." "$dest/"
    rm -rf "$dest.tmp"
    chmod -R u+rwX,go+rX "$dest"
    echo "mkpy: $1 unpacked into $dest"
}

rm -rf "$dest.tmp"
fetch nvidia-cuda-nvrtc "nvidia-cuda-nvrtc>=13,<14" nvidia/cu13/lib/libnvrtc.so.13
fetch nvidia-cuda-runtime "nvidia-cuda-runtime>=13,<14" nvidia/cu13/include/cuda_fp16.h /include/
fetch nvidia-cuda-cccl "nvidia-cuda-cccl>=13,<14" nvidia/cu13/include/cccl/cuda/std/array /include/
