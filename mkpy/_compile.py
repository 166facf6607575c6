"""mx.compile, mx.disable_compile and mx.enable_compile.

MLX's compile traces a function and fuses its element-wise ops; the compiled
function "produces the same output as fun". mkpy does not fuse graphs yet, so
compile returns a function that calls `fun` directly: the same outputs (the
lazy graph is built and evaluated as usual), without the fusion speed-up.
"""
import functools

_enabled = True


def compile(fun=None, inputs=None, outputs=None, shapeless=False):
    """compile(fun, inputs=None, outputs=None, shapeless=False)

    Returns a function that produces the same output as ``fun``. Usable as
    ``mx.compile(f)`` or as a decorator. mkpy runs ``fun`` as is (no fusion).
    """
    if fun is None:  # @mx.compile(shapeless=True)
        return lambda f: compile(f, inputs=inputs, outputs=outputs, shapeless=shapeless)
    if not callable(fun):
        raise TypeError("compile() expects a callable")

    @functools.wraps(fun)
    def compiled(*args, **kwargs):
        return fun(*args, **kwargs)

    return compiled


def disable_compile():
    """Globally disable compilation (mkpy never fuses, so this changes nothing observable)."""
    global _enabled
    _enabled = False


def enable_compile():
    """Globally enable compilation (see disable_compile)."""
    global _enabled
    _enabled = True
