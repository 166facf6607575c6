#!/bin/sh
# Optional Debian packages for `make bench`: PoCL through pyopencl (the OpenCL
# reference for the Metal kernels) and matplotlib (benchmarks/results.png).
# As root, missing ones are installed with apt-get. Otherwise, or if that
# fails, a note names them and the benchmarks run without them ("n/a").
pkgs="python3-pyopencl pocl-opencl-icd python3-matplotlib"

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "note: optional benchmark packages missing:$missing"
    echo "note: skipping them (PoCL columns read n/a, no chart); as root: apt-get install -y$missing"
    exit 0
fi
echo "Installing optional benchmark packages:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
# shellcheck disable=SC2086
apt-get install -y -qq $missing || echo "note: could not install$missing; the benchmarks run without them"
exit 0
