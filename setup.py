"""Builds the extension mkpy._core from csrc/ (C11)."""
import glob
import os
import sysconfig

from setuptools import Extension, setup

sources = sorted(
    glob.glob("csrc/core/*.c") + glob.glob("csrc/kernel/*.c") + glob.glob("csrc/python/*.c")
)

# -fno-math-errno / -fno-trapping-math change no result (mkpy reads neither errno nor
# FP exception flags) but let GCC vectorise loops with math calls and selects.
cflags = ["-std=c11", "-O3", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
          "-fno-strict-aliasing", "-fno-math-errno", "-fno-trapping-math", "-D_GNU_SOURCE"]
if os.environ.get("MKPY_DEBUG"):
    cflags += ["-O0", "-g", "-UNDEBUG"]

include_dirs = ["csrc"]
multiarch = sysconfig.get_config_var("MULTIARCH")
if multiarch and os.path.isdir(f"/usr/include/{multiarch}/openblas-pthread"):
    include_dirs.append(f"/usr/include/{multiarch}/openblas-pthread")

ext = Extension(
    "mkpy._core",
    sources=sources,
    include_dirs=include_dirs,
    extra_compile_args=cflags,
    libraries=["openblas", "m", "pthread"],
)

setup(ext_modules=[ext])
