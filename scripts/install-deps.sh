#!/bin/sh
# Installs the Debian packages mkpy needs, if any are missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -e

pkgs="python3-dev python3-pip python3-numpy python3-pytest python3-pytest-xdist python3-hypothesis python3-setuptools libopenblas-dev zlib1g-dev openmpi-bin libopenmpi-dev"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
available() { command -v apt-cache >/dev/null 2>&1 && apt-cache show "$1" >/dev/null 2>&1; }

# a fresh system (a debootstrap chroot, a container) has no package lists yet
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && ! apt-cache show python3-dev >/dev/null 2>&1; then
    apt-get update -qq || true
fi

missing=""
for p in $pkgs; do
    installed "$p" || missing="$missing $p"
done

# the C compiler that builds the extension (a minimal system has none)
command -v cc >/dev/null 2>&1 || missing="$missing build-essential"

# KissFFT (mx.fft's transforms): optional, installed where the distribution has it.
if ! installed libkissfft-dev && available libkissfft-dev; then missing="$missing libkissfft-dev"; fi

# LLVM's C API (the lockstep pass) and the kernel compiler, clang, of one version N from 15 to 19:
# the pass reads the bitcode of its own clang. An N with both installed is kept (the newest); else
# the newest N the distribution has is installed. MKPY_LLVM_DIR / MKPY_CXX name them by hand.
has_llvm() { [ -f "/usr/lib/llvm-$1/include/llvm-c/Core.h" ]; }
has_clang() { command -v "clang++-$1" >/dev/null 2>&1; }
llvm_ok=""
for v in 19 18 17 16 15; do
    if { [ -n "${MKPY_LLVM_DIR:-}" ] || has_llvm $v; } && { [ -n "${MKPY_CXX:-}" ] || has_clang $v; }; then
        llvm_ok=$v; break
    fi
done
if [ -z "$llvm_ok" ]; then
    for v in 19 18 17 16 15; do
        if available "llvm-$v-dev" && available "clang-$v"; then
            [ -n "${MKPY_LLVM_DIR:-}" ] || has_llvm $v || missing="$missing llvm-$v-dev"
            [ -n "${MKPY_CXX:-}" ] || has_clang $v || missing="$missing clang-$v"
            llvm_ok=$v; break
        fi
    done
fi
if [ -z "$llvm_ok" ]; then
    echo "mkpy needs clang (15 to 19) and LLVM's development files of the same version; this system's" >&2
    echo "package manager offers none: install them (https://apt.llvm.org) and set MKPY_CXX and MKPY_LLVM_DIR." >&2
    exit 1
fi

[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "mkpy needs these Debian packages:$missing" >&2
    echo "Install them as root with:" >&2
    echo "    apt-get install -y$missing" >&2
    exit 1
fi
echo "Installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
# shellcheck disable=SC2086
apt-get install -y -qq $missing
