"""PoCL through pyopencl: the OpenCL side of the kernel benchmarks.

`open_pocl()` returns a Pocl object, or None with a reason when pyopencl or a
PoCL CPU device is missing (then the PoCL columns read "n/a")."""
import os

import numpy as np

KERNELS_CL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.cl")


class Pocl:
    def __init__(self, cl, device, path=KERNELS_CL, options=()):
        self.cl = cl
        self.device = device
        self.ctx = cl.Context(devices=[device])
        self.queue = cl.CommandQueue(self.ctx)
        with open(path) as f:
            self.source = f.read()
        self.program = cl.Program(self.ctx, self.source).build(options=list(options))
        self._kernels = {}

    @property
    def version(self):
        return self.device.platform.version

    def kernel(self, name):
        if name not in self._kernels:
            self._kernels[name] = self.cl.Kernel(self.program, name)
        return self._kernels[name]

    def buffer(self, host_array=None, nbytes=None):
        mf = self.cl.mem_flags
        if host_array is not None:
            return self.cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(host_array))
        return self.cl.Buffer(self.ctx, mf.READ_WRITE, size=nbytes)

    def local(self, nbytes):
        return self.cl.LocalMemory(nbytes)

    def launcher(self, name, gsize, lsize, *args):
        """A zero-argument callable: enqueue the kernel with fixed arguments, wait for it."""
        knl = self.kernel(name)
        knl.set_args(*args)
        cl, q = self.cl, self.queue

        def launch():
            cl.enqueue_nd_range_kernel(q, knl, gsize, lsize)
            q.finish()
        launch.args = args  # set_args keeps no reference: the buffers must outlive the launcher
        return launch

    def read(self, buf, shape, dtype=np.float32):
        out = np.empty(shape, dtype=dtype)
        self.cl.enqueue_copy(self.queue, out, buf)
        self.queue.finish()
        return out


def find_device():
    """(pyopencl module, PoCL CPU device) or (None, reason)."""
    try:
        import pyopencl as cl
    except ImportError:
        return None, "pyopencl missing (apt-get install python3-pyopencl pocl-opencl-icd)"
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # no ICD at all
        return None, "no OpenCL platform (%s)" % str(e).strip()[:60]
    for p in platforms:
        if "portable computing language" in p.name.lower() or "pocl" in p.version.lower():
            devs = p.get_devices()
            if devs:
                return cl, devs[0]
    return None, "no PoCL platform (apt-get install pocl-opencl-icd)"


def open_pocl(path=KERNELS_CL, options=()):
    """A Pocl with the kernels of `path` (kernels.cl), built with `options` (-D ...)."""
    cl, dev = find_device()
    if cl is None:
        return None, dev
    try:
        return Pocl(cl, dev, path, options), ""
    except Exception as e:
        return None, "PoCL set-up failed: %s" % str(e).strip()[:80]
