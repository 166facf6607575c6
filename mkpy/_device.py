"""Devices and streams, as MLX names them.

mkpy has one back-end, the CPU, which runs both CPU ops and Metal kernels.
``mkpy.gpu`` is accepted everywhere MLX accepts it and means that back-end.
These objects carry no computation; they exist so that MLX code that picks
devices or streams runs unchanged.
"""
import contextlib
import enum


class DeviceType(enum.Enum):
    cpu = 0
    gpu = 1

    def __repr__(self):
        return f"DeviceType.{self.name}"


cpu = DeviceType.cpu
gpu = DeviceType.gpu


class Device:
    """A device: ``Device(mkpy.gpu, 0)``."""

    def __init__(self, type, index=0):
        if isinstance(type, int) and not isinstance(type, bool) and type in (0, 1):
            type = DeviceType(type)  # MLX converts 0 / 1 to cpu / gpu
        if not isinstance(type, DeviceType):
            raise TypeError("Device type must be mkpy.cpu or mkpy.gpu")
        self.type = type
        self.index = int(index)

    def __eq__(self, other):
        if isinstance(other, DeviceType):
            return self.type == other
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"Device({self.type.name}, {self.index})"


class Stream:
    """A stream on a device. mkpy evaluates in order on one queue."""

    def __init__(self, index, device):
        self.index = index
        self.device = device

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.index, self.device) == (other.index, other.device)

    def __hash__(self):
        return hash((self.index, self.device))

    def __repr__(self):
        return f"Stream({self.device}, {self.index})"


_default = Device(gpu, 0)
_streams = {}
_stream_count = 0


def default_device():
    """The default device (``Device(gpu, 0)``, as on a Mac)."""
    return _default


def set_default_device(device):
    """Set the default device; accepts a Device or mkpy.cpu / mkpy.gpu."""
    global _default
    _default = device if isinstance(device, Device) else Device(device, 0)


def default_stream(device):
    device = device if isinstance(device, Device) else Device(device, 0)
    return _streams.setdefault(device, Stream(0, device))


def new_stream(device):
    global _stream_count
    device = device if isinstance(device, Device) else Device(device, 0)
    _stream_count += 1
    return Stream(_stream_count, device)


def is_available(device):
    """Whether a device can be used: both are (the CPU back-end serves mkpy.gpu)."""
    device = device if isinstance(device, Device) else Device(device, 0)
    return True


def device_count(device_type):
    """Number of devices of a type: one of each."""
    Device(device_type)  # validates
    return 1


@contextlib.contextmanager
def stream(s):
    """Context manager selecting a stream or device, as mlx.core.stream."""
    global _default
    old = _default
    if isinstance(s, Stream):
        _default = s.device
    elif isinstance(s, (Device, DeviceType)):
        set_default_device(s)
    try:
        yield
    finally:
        _default = old
