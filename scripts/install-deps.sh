#!/bin/sh
# Installs the Debian packages mkpy needs, if any are missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -e

pkgs="python3-dev python3-numpy python3-pytest python3-pytest-xdist python3-hypothesis python3-setuptools libopenblas-dev zlib1g-dev llvm-15-dev libkissfft-dev openmpi-bin libopenmpi-dev"

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done

# The kernel compiler: clang 15 or newer, unless MKPY_CXX names one.
have_clang() {
    for v in 21 20 19 18 17 16 15; do
        command -v "clang++-$v" >/dev/null 2>&1 && return 0
    done
    if command -v clang++ >/dev/null 2>&1; then
        major=$(clang++ -dumpversion 2>/dev/null | cut -d. -f1)
        [ "${major:-0}" -ge 15 ] 2>/dev/null && return 0
    fi
    return 1
}
if [ -z "${MKPY_CXX:-}" ] && ! have_clang; then
    clang_pkg=""
    if command -v apt-cache >/dev/null 2>&1; then
        for v in 15 16 17 18 19 20 21; do
            if apt-cache show "clang-$v" >/dev/null 2>&1; then clang_pkg="clang-$v"; break; fi
        done
    fi
    missing="$missing ${clang_pkg:-clang-15}"
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
