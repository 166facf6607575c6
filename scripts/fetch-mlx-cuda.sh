#!/bin/sh
# Downloads real MLX with its CUDA 13 back-end (PyPI's mlx and mlx-cuda-13 wheels, for CPython 3.12
# on x86-64 Linux) into .wheels/ (ignored by git), for tests/test_mlx_cuda.py's GPU test on a
# machine that has no package registry: mkpy.cuda.metal_kernel runs Metal kernels in real MLX
# through mx.fast.cuda_kernel. The mlx-cuda-13 wheel (about 86 MiB) is split in two parts under
# 48 MiB, .wheels/a/ (with the small mlx wheel) and .wheels/b/, so that each folder can be
# carried on its own; SHA256SUMS checks the reassembled wheel.
#
# The wheels' other requirements (nvidia-cublas, -cufft, -cusolver, -cuda-nvrtc, -cuda-runtime,
# nvidia-cudnn-cu13, nvidia-nccl-cu13) are not fetched: install them from PyPI where there is
# one, or use an environment that has them (docs/kernels.md says which libraries libmlx.so needs).
set -e
VERSION="${MLX_VERSION:-0.32.4}"
PY="${PYTHON:-/usr/bin/python3}"
dest=.wheels
mkdir -p "$dest/a" "$dest/b"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_35_x86_64 --dest "$dest" "mlx==$VERSION" "mlx-cuda-13==$VERSION"
whl=$(ls "$dest"/mlx_cuda_13-"$VERSION"-*.whl)
front=$(ls "$dest"/mlx-"$VERSION"-cp312-*.whl)
rm -f "$dest"/a/* "$dest"/b/*
(cd "$dest" && sha256sum "$(basename "$whl")" "$(basename "$front")" > a/SHA256SUMS)
split -b 45M -d "$whl" "$dest/a/$(basename "$whl").part"
mv "$dest/a/$(basename "$whl").part01" "$dest/b/"
[ ! -e "$dest/a/$(basename "$whl").part02" ] || { echo "the wheel needs more than two parts" >&2; exit 1; }
mv "$front" "$dest/a/"
rm "$whl"
ls -l "$dest/a" "$dest/b"
