"""Builds the extension mkpy._core from csrc/ (C11)."""
import glob
import os
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The layers (docs/design.md, "Layers"): core, the kernel front end, one folder per back-end
# (csrc/backend/<name>/; their ir/ subfolders are separate programs, below), and the binding.
sources = sorted(
    glob.glob("csrc/core/*.c") + glob.glob("csrc/kernel/*.c") + glob.glob("csrc/backend/*/*.c")
    + glob.glob("csrc/python/*.c")
)

# -fno-math-errno / -fno-trapping-math change no result (mkpy reads neither errno nor
# FP exception flags) but let GCC vectorise loops with math calls and selects.
cflags = ["-std=c11", "-O3", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
          "-fno-strict-aliasing", "-fno-math-errno", "-fno-trapping-math", "-D_GNU_SOURCE"]
if os.environ.get("MKPY_DEBUG"):
    cflags += ["-O0", "-g", "-UNDEBUG"]

# `make tsan`: MKPY_SANITIZE=thread builds the extension (not the compiler pass, a program of its own)
# with ThreadSanitizer, into a separate directory (see the Makefile).
sanitize_cflags, sanitize_ldflags = [], []
if os.environ.get("MKPY_SANITIZE") == "thread":
    sanitize_cflags = ["-fsanitize=thread", "-O1", "-g", "-fno-omit-frame-pointer"]
    sanitize_ldflags = ["-fsanitize=thread"]

include_dirs = ["csrc"]
multiarch = sysconfig.get_config_var("MULTIARCH")
if multiarch and os.path.isdir(f"/usr/include/{multiarch}/openblas-pthread"):
    include_dirs.append(f"/usr/include/{multiarch}/openblas-pthread")

# KissFFT (Debian's libkissfft-dev, BSD) for mx.fft; its headers live in /usr/include/kissfft.
if os.path.isdir("/usr/include/kissfft"):
    include_dirs.append("/usr/include/kissfft")

HEADERS = glob.glob("csrc/**/*.h", recursive=True)

ext = Extension(
    "mkpy._core",
    sources=sources,
    depends=HEADERS,  # else a change to a header alone leaves the extension "up-to-date"
    include_dirs=include_dirs,
    extra_compile_args=cflags + sanitize_cflags,
    extra_link_args=sanitize_ldflags,
    libraries=["openblas", "kissfft-float", "z", "m", "pthread"],
)
# The lockstep engine's compiler pass (csrc/backend/cpu/ir/) is a program,
# mkpy/mkpy-cbs-pass, linked with LLVM 15's C API (Debian's llvm-15-dev) and run
# by the JIT like clang. Without LLVM 15 it is left out and cooperative kernels
# run on fibers.
LLVM_DIR = os.environ.get("MKPY_LLVM_DIR", "/usr/lib/llvm-15")
HAVE_LLVM = os.path.isfile(os.path.join(LLVM_DIR, "include", "llvm-c", "Core.h"))
PASS_SOURCES = ["csrc/backend/cpu/ir/cbs_ir.c", "csrc/backend/cpu/ir/cbs_main.c", "csrc/backend/cpu/ir/check_ir.c",
                "csrc/backend/cpu/ir/ir_load.c"]

ZYGOTE_SOURCE = "csrc/backend/cpu/zygote/cc_zygote.c"


def _parallel_compile(self, sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                      extra_preargs=None, extra_postargs=None, depends=None):
    """CCompiler.compile on every core, skipping objects newer than their source and every
    header (the kernels with several CPU clones take a minute each)."""
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs)
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)
    newest_header = max((os.path.getmtime(h) for h in HEADERS), default=0)

    def one(obj):
        src, ext_ = build[obj]
        if os.path.exists(obj) and os.path.getmtime(obj) > max(os.path.getmtime(src), newest_header):
            return
        self._compile(obj, src, ext_, cc_args, extra_postargs, pp_opts)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(one, objects))
    return objects


class BuildExt(build_ext):
    def build_extensions(self):
        self.compiler.compile = _parallel_compile.__get__(self.compiler)
        super().build_extensions()

    def run(self):
        super().run()
        if HAVE_LLVM:
            self.build_pass()
        if sys.platform.startswith("linux"):
            self.build_zygote()

    def build_zygote(self):
        """mkpy/libmkpy-cc-zygote.so: preloaded into the kernel compiler, it keeps clang started
        (csrc/backend/cpu/zygote/cc_zygote.c)."""
        out = os.path.join(os.path.dirname(self.get_ext_fullpath("mkpy._core")), "libmkpy-cc-zygote.so")
        if os.path.exists(out) and os.path.getmtime(out) > os.path.getmtime(ZYGOTE_SOURCE):
            return
        objects = self.compiler.compile([ZYGOTE_SOURCE], output_dir=self.build_temp, extra_postargs=cflags)
        self.compiler.link_shared_object(objects, out, libraries=["dl"])

    def build_pass(self):
        out = os.path.join(os.path.dirname(self.get_ext_fullpath("mkpy._core")), "mkpy-cbs-pass")
        self.compiler.compile = _parallel_compile.__get__(self.compiler)
        newest = max(os.path.getmtime(f) for f in PASS_SOURCES + HEADERS + ["mkpy/include/mkpy_launch.h"])
        if os.path.exists(out) and os.path.getmtime(out) > newest:
            return
        objects = self.compiler.compile(PASS_SOURCES, output_dir=self.build_temp,
                                        include_dirs=[os.path.join(LLVM_DIR, "include")],
                                        extra_postargs=cflags)
        self.compiler.link_executable(objects, "mkpy-cbs-pass", output_dir=os.path.dirname(out),
                                      libraries=["LLVM-15"], library_dirs=[os.path.join(LLVM_DIR, "lib")],
                                      runtime_library_dirs=[os.path.join(LLVM_DIR, "lib")])


setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
