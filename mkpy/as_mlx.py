"""The stand-in mode: ``import mlx.core`` gives mkpy, so an MLX project runs unmodified on Linux.

Turn it on with any of:

* ``mkpy.as_mlx()`` in Python, before the project imports ``mlx.core``;
* ``python -m mkpy run script.py [args]`` or ``python -m mkpy run -m module [args]``;
* ``MKPY_AS_MLX=1``: read by ``import mkpy``, and at interpreter start-up when mkpy is installed
  as a wheel (its ``mkpy_as_mlx.pth`` imports this module only when the variable is set);
* ``pytest -p mkpy.as_mlx`` (a pytest plugin: on before conftest files are imported).

``mlx.core`` is then the ``mkpy`` module and ``mlx.core.fast``, ``.linalg``, ``.random``, ``.fft``,
``.distributed``, ``.metal``, ``.cuda`` are mkpy's submodules. ``mlx.nn``, ``mlx.optimizers`` and
``mlx.utils`` are MLX's own pure-Python code, from the installed ``mlx`` package (``pip install
mlx``; on Linux, without extras, that wheel holds no compiled core). Dtypes print as MLX's
(``mlx.core.float32``); ``mkpy.__name__`` stays ``"mkpy"``.

This module is only an import hook; every op is mkpy's C extension.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

__all__ = ["install", "installed"]

_HINT = ("mkpy stands in for mlx.core only; mlx.nn, mlx.optimizers and mlx.utils are MLX's "
         "pure-Python package: pip install mlx")


class _Existing(importlib.abc.Loader):
    """Loads an already imported mkpy module under an mlx.core name, keeping its own __spec__."""

    def __init__(self, module):
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):
        module.__spec__ = self._spec  # importlib set the mlx.core spec; mkpy keeps its own


class _EmptyPackage(importlib.abc.Loader):
    """The package ``mlx`` when MLX's pure-Python package is not installed."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__doc__ = "mlx.core from mkpy (mkpy.as_mlx); MLX's Python package is not installed."


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.own_package = False

    def find_spec(self, name, path=None, target=None):
        if name == "mlx":
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(name, path, target)
                    if spec is not None:
                        return spec
            self.own_package = True
            return importlib.machinery.ModuleSpec(name, _EmptyPackage(), is_package=True)
        if name == "mlx.core" or name.startswith("mlx.core."):
            target = "mkpy" + name[len("mlx.core"):]
            try:
                module = importlib.import_module(target)
            except ModuleNotFoundError as e:
                if e.name != target:
                    raise  # a module that mkpy's submodule imports is missing
                return None
            return importlib.util.spec_from_loader(name, _Existing(module))
        if name.startswith("mlx.") and self.own_package:
            raise ModuleNotFoundError("No module named %r (%s)" % (name, _HINT), name=name)
        return None


_finder = None


def installed():
    """True when ``import mlx.core`` gives mkpy."""
    return _finder is not None and _finder in sys.meta_path


def install():
    """Makes ``import mlx.core`` (and its submodules) give mkpy; idempotent. Raises RuntimeError
    when MLX's own compiled ``mlx.core`` was imported already."""
    global _finder
    if installed():
        return
    core = sys.modules.get("mlx.core")
    if core is not None and getattr(core, "__name__", None) != "mkpy":
        raise RuntimeError("MLX's own mlx.core is imported already; turn on mkpy.as_mlx() before "
                           "anything imports mlx.core")
    import mkpy
    _finder = _Finder()
    sys.meta_path.insert(0, _finder)
    mkpy._core._set_public_name("mlx.core")
    os.environ["MKPY_AS_MLX"] = "1"  # child processes follow where mkpy_as_mlx.pth is installed


class _CallableModule(types.ModuleType):
    def __call__(self):
        """Turns the stand-in mode on: `import mlx.core` gives mkpy (idempotent)."""
        install()


sys.modules[__name__].__class__ = _CallableModule


# ------------------------------------------------------------------ pytest plugin (-p mkpy.as_mlx)

def pytest_load_initial_conftests(early_config, parser, args):
    install()


def pytest_configure(config):
    install()


def pytest_report_header(config):
    return "mkpy stands in for mlx.core (mkpy.as_mlx)"
