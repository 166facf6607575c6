"""Devices and streams, as MLX names them.

mkpy has one back-end, the CPU, which runs both CPU ops and Metal kernels.
``mkpy.gpu`` is accepted everywhere MLX accepts it and means that back-end.
These objects carry no computation; they exist so that MLX code that picks
devices or streams runs unchanged.
"""
import enum
import threading


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


_default = Device(gpu, 0)  # global, as MLX's default device
_lock = threading.Lock()
_stream_count = 0
_main = threading.main_thread()
_local = threading.local()  # per thread: {Device: its default Stream}


def _next_index():
    global _stream_count
    with _lock:
        _stream_count += 1
        return _stream_count


def _to_device(device, fname):
    if isinstance(device, Device):
        return device
    if isinstance(device, DeviceType):
        return Device(device, 0)
    raise TypeError(f"{fname}(): device must be a mkpy.Device or mkpy.cpu / mkpy.gpu, not {type(device).__name__}")


def _thread_defaults():
    d = getattr(_local, "defaults", None)
    if d is None:
        d = _local.defaults = {}
    return d


def default_device():
    """The default device (``Device(gpu, 0)``, as on a Mac). Shared by all threads, as in MLX."""
    return _default


def set_default_device(device):
    """Set the default device; accepts a Device or mkpy.cpu / mkpy.gpu."""
    global _default
    _default = _to_device(device, "set_default_device")


def default_stream(device):
    """This thread's default stream on a device. Streams are per thread, as in MLX: the main
    thread's default streams have index 0, another thread gets streams of its own."""
    device = _to_device(device, "default_stream")
    d = _thread_defaults()
    s = d.get(device)
    if s is None:
        s = d[device] = Stream(0 if threading.current_thread() is _main else _next_index(), device)
    return s


def set_default_stream(stream):
    """Make a stream this thread's default for its device (the default device is unchanged)."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_default_stream(): expected a mkpy.Stream, not {type(stream).__name__}")
    _thread_defaults()[stream.device] = stream


def new_stream(device):
    """A new stream on a device."""
    return Stream(_next_index(), _to_device(device, "new_stream"))


def is_available(device):
    """Whether a device can be used: both are (the CPU back-end serves mkpy.gpu)."""
    _to_device(device, "is_available")
    return True


def device_count(device_type):
    """Number of devices of a type: one of each."""
    Device(device_type)  # validates
    return 1


class StreamContext:
    """Context manager making a stream (or a device's default stream) the default: the default
    device becomes its device, and this thread's default stream for it; both are restored on exit."""

    def __init__(self, s):
        if s is None:
            raise RuntimeError("[StreamContext] Invalid argument, please specify a stream or device.")
        if not isinstance(s, Stream):
            _to_device(s, "stream")
        self._s = s
        self._saved = []

    def __enter__(self):
        s = self._s if isinstance(self._s, Stream) else default_stream(self._s)
        self._saved.append(default_stream(default_device()))
        set_default_device(s.device)
        set_default_stream(s)
        return self

    def __exit__(self, exc_type=None, exc_value=None, traceback=None):
        old = self._saved.pop()
        set_default_device(old.device)
        set_default_stream(old)
        return False


def stream(s):
    """Context manager selecting a stream or device, as mlx.core.stream: ``with mx.stream(mx.cpu):``."""
    return StreamContext(s)
