"""Devices and streams, as MLX names them: re-exported from the C extension
(csrc/python/py_stream.c over csrc/core/stream.c)."""
from ._core import (  # noqa: F401
    Device, DeviceType, Stream, StreamContext, ThreadLocalStream, cpu, gpu, default_device, set_default_device,
    default_stream, set_default_stream, new_stream, new_thread_unsafe_stream, new_thread_local_stream,
    clear_streams, stream, is_available, device_count,
)
