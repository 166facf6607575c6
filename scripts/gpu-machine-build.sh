#!/bin/sh
# Builds mkpy and runs its suite on a machine that reaches no package registry (the GPU machine:
# Ubuntu 24.04, clang 16 and LLVM 16's libraries without headers; docs/design.md), from Debian
# packages carried in .debs/ (git ignores it).
#
#   sh scripts/gpu-machine-build.sh download   # here: fetch the .debs (about 3.5 MB once slimmed)
#   sh scripts/gpu-machine-build.sh            # there: unpack them into a prefix, build, check, test
#
# The packages are unpacked into $MKPY_PREFIX (never into /). PYTEST_ARGS overrides the test
# arguments (default: one worker per core, each test file on one worker).
set -e
cd "$(dirname "$0")/.."

if [ "${1:-}" = download ]; then
    mkdir -p .debs
    cd .debs && apt-get download ${MKPY_DEBS:-llvm-16-dev libkissfft-dev libkissfft-float131}
    # llvm-N-dev is 37 MB, nearly all static libraries the build never links (it uses the
    # system's libLLVM): keep its headers and small files only (about 3 MB), so that a device
    # call can carry .debs beside other files under its 64 MiB limit.
    for d in llvm-*-dev_*.deb; do
        [ -e "$d" ] || continue
        t=$(mktemp -d)
        dpkg -x "$d" "$t"
        tar -C "$t" --exclude='*.a' --exclude='*.so*' -cJf "${d%.deb}.headers.tar.xz" usr
        rm -rf "$t" "$d"
    done
    exit 0
fi

P=${MKPY_PREFIX:-/tmp/mkpy-pfx}
PY=${PYTHON:-python3}
ls .debs/*.deb >/dev/null 2>&1 || { echo "no .debs/*.deb: run 'sh $0 download' where apt works" >&2; exit 1; }
mkdir -p "$P"
for f in .debs/*.deb; do dpkg -x "$f" "$P"; done
for f in .debs/*.headers.tar.xz; do [ ! -e "$f" ] || tar -C "$P" -xJf "$f"; done

# LLVM: the newest llvm-N (15 to 19) whose headers were unpacked, linked with this system's
# libLLVM-N.so.1 when the packages did not bring the library itself.
for v in 19 18 17 16 15; do
    d="$P/usr/lib/llvm-$v"
    [ -f "$d/include/llvm-c/Core.h" ] || continue
    if [ ! -e "$d/lib/libLLVM-$v.so" ] && [ ! -e "$d/lib/libLLVM.so" ]; then
        sys=$(ls /usr/lib/x86_64-linux-gnu/libLLVM-$v.so.1 /usr/lib/x86_64-linux-gnu/libLLVM.so.$v.1 \
                 /usr/lib/llvm-$v/lib/libLLVM-$v.so 2>/dev/null | head -n 1)
        [ -n "$sys" ] || { echo "no libLLVM-$v on this system" >&2; continue; }
        mkdir -p "$d/lib"
        ln -sf "$sys" "$d/lib/libLLVM-$v.so"
    fi
    export MKPY_LLVM_DIR="$d"
    break
done
export CFLAGS="${CFLAGS:-} -I$P/usr/include/kissfft"
export LDFLAGS="${LDFLAGS:-} -L$P/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

N=$(nproc)
echo "== build (MKPY_LLVM_DIR=${MKPY_LLVM_DIR:-none})"
$PY setup.py -q build_ext --inplace -j "$N"
PYTHONPATH=. $PY -c "import mkpy; print(mkpy.metal.precompile_runtime())" || true
echo "== python -m mkpy"
PYTHONPATH=. $PY -m mkpy || true
echo "== tests"
PYTHONPATH=. $PY -m pytest ${PYTEST_ARGS:--q -n $N --dist loadfile} tests
