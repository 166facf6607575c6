"""mkpy: MLX's Python API with Metal kernels (``mx.fast.metal_kernel``) run on the CPU.

Use it as ``import mkpy as mx``. Everything is implemented in the C extension
``mkpy._core``; this package only re-exports it.
"""
import os as _os

# OpenBLAS's threads spin for 2^28 cycles after each product before they
# sleep, competing with mkpy's own pool for the cores; 2^20 keeps them out of
# its way (read when libopenblas loads, on the import below).
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

try:
    from . import _core
except ImportError as _e:  # a shared library the extension links is missing: name its package
    _pkgs = {"libopenblas": "libopenblas0-pthread", "libkissfft": "libkissfft-float131", "libz.": "zlib1g",
             "libubsan": "libubsan1", "libtsan": "libtsan2"}
    _pkg = next((p for lib, p in _pkgs.items() if lib in str(_e)), None)
    if _pkg is None:
        raise
    raise ImportError("%s\nmkpy needs the Debian/Ubuntu package %s: apt-get install %s" % (_e, _pkg, _pkg)) from _e
from ._core import *  # noqa: F401,F403
from ._core import array, Dtype, DtypeCategory, bool_  # noqa: F401
# the star import bound random, fast, metal, distributed and cuda to the extension's submodules;
# drop those so the import below loads the package's wrapper modules
# (mkpy/random.py, ...) and binds them, as `import mkpy.random` would
del random, fast, metal, distributed, cuda  # noqa: F821
from . import random, fast, metal, distributed, cuda  # noqa: F401,E402
del fft  # noqa: F821
from . import fft  # noqa: F401,E402
from ._device import (  # noqa: F401
    Device, DeviceType, Stream, StreamContext, cpu, gpu, default_device,
    set_default_device, default_stream, set_default_stream, new_stream, stream, is_available, device_count,
)

# the kernel runtime headers ship in mkpy/include
_core.metal._set_runtime_dir(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include"))

__version__ = "0.1.0"

# mkpy.linalg: the package's wrapper module replaces the extension's submodule bound above
del linalg  # noqa: F821,E402
from . import linalg  # noqa: F401,E402
from . import _reprlib_fix  # noqa: F401,E402  (arrays in pytest's assertion messages)
from . import testing  # noqa: F401,E402  (mkpy.testing.assert_allclose)
