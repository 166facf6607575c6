"""Builds the extension mkpy._core from csrc/ (C11)."""
import glob
import os
import shlex
import shutil
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# The layers (docs/design.md, "Layers"): core, the kernel front end, one folder per back-end
# (csrc/backend/<name>/; their ir/ subfolders are separate programs, below), and the binding.
sources = sorted(
    glob.glob("csrc/core/*.c") + glob.glob("csrc/kernel/*.c") + glob.glob("csrc/backend/*.c")
    + glob.glob("csrc/backend/*/*.c")
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
# `make ubsan`: MKPY_SANITIZE=undefined, UndefinedBehaviorSanitizer (float-cast-overflow is not part of
# GCC's -fsanitize=undefined: it is named too).
sanitize_cflags, sanitize_ldflags = [], []
if os.environ.get("MKPY_SANITIZE") == "thread":
    sanitize_cflags = ["-fsanitize=thread", "-O1", "-g", "-fno-omit-frame-pointer"]
    sanitize_ldflags = ["-fsanitize=thread"]
elif os.environ.get("MKPY_SANITIZE") == "undefined":
    sanitize_cflags = ["-fsanitize=undefined,float-cast-overflow", "-O1", "-g", "-fno-omit-frame-pointer"]
    sanitize_ldflags = ["-fsanitize=undefined,float-cast-overflow"]

include_dirs = ["csrc"]
multiarch = sysconfig.get_config_var("MULTIARCH")
if multiarch and os.path.isdir(f"/usr/include/{multiarch}/openblas-pthread"):
    include_dirs.append(f"/usr/include/{multiarch}/openblas-pthread")

# KissFFT (Debian's libkissfft-dev, BSD) for mx.fft; its headers live in /usr/include/kissfft.
# Optional: without it (see BuildExt.detect_kissfft) mx.fft's transforms raise and the rest works.
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
    libraries=["openblas", "z", "m", "pthread"],
)
# The lockstep engine's compiler pass (csrc/backend/cpu/ir/) is a program,
# mkpy/mkpy-cbs-pass, linked with the C API of LLVM 15 to 19 (Debian's llvm-N-dev) and run
# by the JIT like clang. Without LLVM it is left out and cooperative kernels run on fibers.
LLVM_MIN, LLVM_MAX = 15, 19


def llvm_major(d):
    """LLVM_VERSION_MAJOR of the LLVM whose headers are in d/include, or None."""
    try:
        with open(os.path.join(d, "include", "llvm", "Config", "llvm-config.h")) as f:
            for line in f:
                if line.startswith("#define LLVM_VERSION_MAJOR"):
                    return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        pass
    tail = os.path.basename(os.path.normpath(d)).rpartition("-")[2]  # /usr/lib/llvm-16
    return int(tail) if tail.isdigit() else None


def find_llvm():
    """(dir, major, library name) of the LLVM to link the pass with: MKPY_LLVM_DIR, else the
    newest /usr/lib/llvm-N (15 <= N <= 19) with the C API's headers and its shared library (one with
    its clang first)."""
    env = os.environ.get("MKPY_LLVM_DIR")
    # an LLVM whose clang++-N is on PATH comes first: the JIT then compiles with that clang, whose
    # bitcode the pass reads as written
    versions = sorted(range(LLVM_MIN, LLVM_MAX + 1), key=lambda v: (shutil.which(f"clang++-{v}") is not None, v),
                      reverse=True)
    dirs = [env] if env else [f"/usr/lib/llvm-{v}" for v in versions]
    for d in dirs:
        if not os.path.isfile(os.path.join(d, "include", "llvm-c", "Core.h")):
            if env:
                print(f"mkpy: MKPY_LLVM_DIR={d} has no include/llvm-c/Core.h", flush=True)
            continue
        major = llvm_major(d)
        if major is None or not LLVM_MIN <= major <= LLVM_MAX:
            print(f"mkpy: {d} is LLVM {major}; the lockstep pass takes LLVM {LLVM_MIN} to {LLVM_MAX}", flush=True)
            continue
        for lib in (f"LLVM-{major}", "LLVM"):
            if os.path.exists(os.path.join(d, "lib", f"lib{lib}.so")):
                return d, major, lib
        print(f"mkpy: {d}/lib has no libLLVM-{major}.so or libLLVM.so", flush=True)
    return None


LLVM = find_llvm()
HAVE_LLVM = LLVM is not None
PASS_SOURCES = ["csrc/backend/cpu/ir/cbs_ir.c", "csrc/backend/cpu/ir/cbs_main.c", "csrc/backend/cpu/ir/check_ir.c",
                "csrc/backend/cpu/ir/ir_load.c", "csrc/backend/cpu/srvd.c"]

# the zygote and the pass program share srvd.c (the shared daemons) with the extension
ZYGOTE_SOURCES = ["csrc/backend/cpu/zygote/cc_zygote.c", "csrc/backend/cpu/srvd.c"]


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


# the sources that read the macros BuildExt defines (MKPY_NO_KISSFFT, MKPY_PASS_LLVM_MAJOR)
MACRO_READERS = ["csrc/core/ops_fft.c", "csrc/backend/cpu/jit.c", "csrc/kernel/envcheck.c"]


def _try_build(compiler, tmp, code, include_dirs, libraries):
    """Whether `code` compiles and links as a program with these headers and libraries."""
    os.makedirs(tmp, exist_ok=True)
    src = os.path.join(tmp, "mkpy_probe.c")
    with open(src, "w") as f:
        f.write(code)
    try:
        objs = compiler.compile([src], output_dir=tmp, include_dirs=include_dirs)
        # a program's link does not get LDFLAGS from distutils (the extension's does)
        compiler.link_executable(objs, "mkpy_probe", output_dir=tmp, libraries=libraries,
                                 extra_preargs=shlex.split(os.environ.get("LDFLAGS", "")))
        return True
    except Exception:  # CompileError, LinkError
        return False


class BuildExt(build_ext):
    def detect_kissfft(self, ext):
        """Links KissFFT when its header and library are found, else builds without mx.fft's transforms."""
        code = "#include <kiss_fft.h>\nint main(void) { kiss_fft_free(kiss_fft_alloc(8, 0, 0, 0)); return 0; }\n"
        if os.environ.get("MKPY_NO_KISSFFT") not in (None, "", "0"):  # a build without it, by hand
            print("mkpy: MKPY_NO_KISSFFT is set", flush=True)
            ext.define_macros.append(("MKPY_NO_KISSFFT", "1"))
        elif _try_build(self.compiler, os.path.join(self.build_temp, "probe"), code, ext.include_dirs,
                      ["kissfft-float", "m"]):
            ext.libraries.insert(1, "kissfft-float")
        else:
            ext.define_macros.append(("MKPY_NO_KISSFFT", "1"))
            print("mkpy: KissFFT not found (Debian/Ubuntu: apt-get install libkissfft-dev): building without "
                  "mx.fft's transforms", flush=True)

    def check_requirements(self, ext):
        """Stops with the packages to install when a required library or header is missing."""
        tmp = os.path.join(self.build_temp, "probe")
        need = [("python3-dev", "#include <Python.h>\nint main(void) { return 0; }\n", []),
                ("libopenblas-dev", "#include <cblas.h>\nint main(void) { return (int)cblas_sdot(0, 0, 1, 0, 1); }\n",
                 ["openblas"]),
                ("zlib1g-dev", "#include <zlib.h>\nint main(void) { return (int)crc32(0, 0, 0); }\n", ["z"])]
        dirs = ext.include_dirs + [sysconfig.get_paths()["include"]]
        missing = [pkg for pkg, code, libs in need if not _try_build(self.compiler, tmp, code, dirs, libs)]
        if missing:
            raise SystemExit("mkpy: cannot build: missing system packages (Debian/Ubuntu names): " + " ".join(missing) +
                             "\n    install them as root with: apt-get install -y " + " ".join(missing) +
                             "\n    (scripts/install-deps.sh installs every package mkpy uses)")

    def build_extensions(self):
        for e in self.extensions:
            self.check_requirements(e)
            self.detect_kissfft(e)
            if HAVE_LLVM:  # the JIT prefers the clang whose bitcode this LLVM reads as it was written
                e.define_macros.append(("MKPY_PASS_LLVM_MAJOR", str(LLVM[1])))
        # the objects of the files that read these macros (another LLVM, KissFFT found or not) are stale
        config = os.path.join(self.build_temp, "mkpy-config")
        now = repr([e.define_macros for e in self.extensions])
        try:
            with open(config) as f:
                if f.read() != now:
                    self.force = True  # relink (the objects not listed here are kept: _parallel_compile)
                    for src in MACRO_READERS:
                        obj = os.path.join(self.build_temp, os.path.splitext(src)[0] + ".o")
                        if os.path.exists(obj):
                            os.unlink(obj)
        except OSError:
            pass
        os.makedirs(self.build_temp, exist_ok=True)
        with open(config, "w") as f:
            f.write(now)
        self.compiler.compile = _parallel_compile.__get__(self.compiler)
        print(f"mkpy: compiling {sum(len(e.sources) for e in self.extensions)} C files on "
              f"{os.cpu_count() or 1} cores", flush=True)
        super().build_extensions()

    def run(self):
        super().run()
        if HAVE_LLVM:
            print(f"mkpy: the lockstep pass uses LLVM {LLVM[1]} ({LLVM[0]})", flush=True)
            self.build_pass()
        else:
            print(f"mkpy: no LLVM {LLVM_MIN}-{LLVM_MAX} development files (Debian/Ubuntu: apt-get install "
                  f"llvm-{LLVM_MIN}-dev, or set MKPY_LLVM_DIR): kernels with barriers will run on fibers",
                  flush=True)
        if sys.platform.startswith("linux"):
            self.build_zygote()

    def build_zygote(self):
        """mkpy/libmkpy-cc-zygote.so: preloaded into the kernel compiler, it keeps clang started
        (csrc/backend/cpu/zygote/cc_zygote.c)."""
        out = os.path.join(os.path.dirname(self.get_ext_fullpath("mkpy._core")), "libmkpy-cc-zygote.so")
        newest = max(os.path.getmtime(f) for f in ZYGOTE_SOURCES + ["csrc/backend/cpu/srvd.h"])
        if os.path.exists(out) and os.path.getmtime(out) > newest:
            return
        objects = self.compiler.compile(ZYGOTE_SOURCES, output_dir=os.path.join(self.build_temp, "zygote"),
                                        extra_postargs=cflags + ["-fPIC"])
        self.compiler.link_shared_object(objects, out, libraries=["dl"])

    def build_pass(self):
        out = os.path.join(os.path.dirname(self.get_ext_fullpath("mkpy._core")), "mkpy-cbs-pass")
        self.compiler.compile = _parallel_compile.__get__(self.compiler)
        newest = max(os.path.getmtime(f) for f in PASS_SOURCES + HEADERS + ["mkpy/include/mkpy_launch.h"])
        stamp = out + ".llvm"  # the LLVM it was linked with: another one rebuilds it
        try:
            with open(stamp) as f:
                same = f.read() == LLVM[0]
        except OSError:
            same = False
        if same and os.path.exists(out) and os.path.getmtime(out) > newest:
            return
        llvm_dir, major, lib = LLVM
        objects = self.compiler.compile(PASS_SOURCES, output_dir=os.path.join(self.build_temp, f"llvm-{major}"),
                                        include_dirs=[os.path.join(llvm_dir, "include")],
                                        macros=[("MKPY_LLVM_MAJOR", str(major))], extra_postargs=cflags)
        self.compiler.link_executable(objects, "mkpy-cbs-pass", output_dir=os.path.dirname(out),
                                      libraries=[lib], library_dirs=[os.path.join(llvm_dir, "lib")],
                                      runtime_library_dirs=[os.path.join(llvm_dir, "lib")])
        with open(stamp, "w") as f:
            f.write(llvm_dir)


class BuildPy(build_py):
    """Also puts mkpy_as_mlx.pth at the top of the wheel: at start-up it imports mkpy (whose import
    turns the stand-in mode on) only when MKPY_AS_MLX is set, so `MKPY_AS_MLX=1 python script.py`
    gives mkpy to `import mlx.core`."""

    def run(self):
        super().run()
        self.copy_file("mkpy_as_mlx.pth", os.path.join(self.build_lib, "mkpy_as_mlx.pth"))


setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
