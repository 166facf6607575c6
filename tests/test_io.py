"""mx.save / mx.load / mx.savez / mx.savez_compressed / mx.save_safetensors:
round trips with NumPy's own .npy/.npz code, and malformed files."""
import io
import os
import json
import struct
import zipfile

import numpy as np
import pytest

import mkpy as mx

NP_DTYPES = [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32,
             np.int64, np.float16, np.float32, np.float64, np.complex64]
ALL = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32,
       mx.int64, mx.float16, mx.float32, mx.float64, mx.bfloat16, mx.complex64]


def sample(dt, shape=(2, 3)):
    n = int(np.prod(shape))
    x = (np.arange(n) % 7 - 2).reshape(shape)
    if dt == np.complex64:
        return (x + 1j * x[::-1]).astype(dt)
    return x.astype(dt)


def mx_sample(dt, shape=(2, 3)):
    return (mx.arange(int(np.prod(shape))) % 7 - 2).reshape(shape).astype(dt)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and mx.array_equal(a, b).item()


# ------------------------------------------------------------------- npy

@pytest.mark.parametrize("dt", NP_DTYPES)
def test_npy_numpy_roundtrip(tmp_path, dt):
    x = sample(dt)
    np.save(tmp_path / "a.npy", x)
    a = mx.load(str(tmp_path / "a.npy"))
    assert a.shape == (2, 3)
    np.testing.assert_array_equal(np.array(a), x)
    mx.save(str(tmp_path / "b"), a)  # .npy appended
    y = np.load(tmp_path / "b.npy")
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", ALL)
def test_npy_mx_roundtrip_every_dtype(tmp_path, dt):
    for shape in [(), (0,), (3, 0, 2), (5,), (2, 3, 4)]:
        a = mx_sample(dt, shape)
        mx.save(str(tmp_path / "x.npy"), a)
        assert same(mx.load(str(tmp_path / "x.npy")), a)


def test_npy_header_alignment_and_noncontiguous(tmp_path):
    a = mx.arange(24).reshape(2, 3, 4).transpose(2, 0, 1)[:, ::2]
    mx.save(str(tmp_path / "t.npy"), a)
    raw = (tmp_path / "t.npy").read_bytes()
    hlen = struct.unpack("<H", raw[8:10])[0]
    assert (10 + hlen) % 64 == 0
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), np.array(a))


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("fortran", [False, True])
def test_npy_byteorder_and_fortran(tmp_path, order, fortran):
    for dt in ["i2", "u4", "i8", "f2", "f4", "f8", "c8"]:
        x = np.arange(24).reshape(2, 3, 4).astype(order + dt)
        if dt == "c8":
            x = x + 1j
        if fortran:
            x = np.asfortranarray(x)
        np.save(tmp_path / "f.npy", x)
        assert np.lib.format.read_magic(open(tmp_path / "f.npy", "rb"))
        a = mx.load(str(tmp_path / "f.npy"))
        np.testing.assert_array_equal(np.array(a), x.astype("=" + dt))


def test_npy_file_objects_and_pathlike(tmp_path):
    a = mx.array([[1.5, 2.0], [3.0, -4.0]])
    buf = io.BytesIO()
    mx.save(buf, a)
    buf.seek(0)
    np.testing.assert_array_equal(np.load(buf), np.array(a))
    buf.seek(0)
    assert same(mx.load(buf, format="npy"), a)
    p = tmp_path / "p.npy"
    mx.save(p, a)
    assert same(mx.load(p), a)
    with open(p, "rb") as f:  # format from the file object's name
        assert same(mx.load(f), a)


def test_load_format_errors(tmp_path):
    with pytest.raises(ValueError, match="Could not infer file format"):
        mx.load(str(tmp_path / "noext"))
    with pytest.raises(ValueError, match="Unknown file format xyz"):
        mx.load(str(tmp_path / "a.xyz"))
    with pytest.raises(ValueError, match="metadata not supported for format npy"):
        mx.load(str(tmp_path / "a.npy"), return_metadata=True)
    with pytest.raises(ValueError, match="Failed to open"):
        mx.load(str(tmp_path / "missing.npy"))
    with pytest.raises(ValueError, match="Input must be a file-like object"):
        mx.save(3, mx.array(1))


def npy_bytes(x):
    b = io.BytesIO()
    np.save(b, x)
    return b.getvalue()


@pytest.mark.parametrize("mutate", [
    lambda b: b[:5],                                      # shorter than the preamble
    lambda b: b"\x00" + b[1:],                            # wrong magic
    lambda b: b[:60],                                     # truncated header
    lambda b: b[:-1],                                     # truncated data
    lambda b: b.replace(b"(2, 3)", b"(9999999, 99999999)"),  # huge declared shape
    lambda b: b.replace(b"(2, 3)", b"(99999999999999999999,"),
    lambda b: b.replace(b"'<f4'", b"'<U4'"),              # unsupported dtype
    lambda b: b.replace(b"'fortran_order': False", b"'fortran_order': Maybe"),
    lambda b: b[:6] + b"\x09" + b[7:],                    # unknown version
])
def test_npy_malformed(tmp_path, mutate):
    p = tmp_path / "bad.npy"
    p.write_bytes(mutate(npy_bytes(np.ones((2, 3), np.float32))))
    # missing data is found when the array is evaluated (as MLX reads it), the rest at load
    with pytest.raises(RuntimeError, match=r"\[load\]"):
        mx.eval(mx.load(str(p)))


def test_npy_object_and_structured_refused(tmp_path):
    np.save(tmp_path / "s.npy", np.zeros(2, dtype=[("a", "i4")]))
    with pytest.raises(RuntimeError, match="Unsupported .npy dtype"):
        mx.load(str(tmp_path / "s.npy"))


# ------------------------------------------------------------------- npz

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("compressed", [False, True])
def test_npz_roundtrip_with_numpy(tmp_path, compressed):
    save = mx.savez_compressed if compressed else mx.savez
    arrs = {d.__str__().split(".")[-1]: mx_sample(d, (3, 4)) for d in ALL}
    save(str(tmp_path / "z"), mx.array([1, 2]), mx.zeros((0, 2)), **arrs)
    got = mx.load(str(tmp_path / "z.npz"))
    assert set(got) == {"arr_0", "arr_1", *arrs}
    for k, v in arrs.items():
        assert same(got[k], v)
    assert same(got["arr_0"], mx.array([1, 2]))
    with np.load(tmp_path / "z.npz") as npz:
        np.testing.assert_array_equal(npz["arr_0"], [1, 2])
        np.testing.assert_array_equal(npz["float32"], np.array(arrs["float32"]))
    info = zipfile.ZipFile(tmp_path / "z.npz").infolist()
    assert {i.compress_type for i in info} == {zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED}
    assert zipfile.ZipFile(tmp_path / "z.npz").testzip() is None


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_written_by_numpy(tmp_path, compressed):
    save = np.savez_compressed if compressed else np.savez
    xs = {"a": np.arange(1000, dtype=np.int64).reshape(10, 100), "b": np.float32(3.5),
          "c": np.asfortranarray(np.ones((3, 2), ">f8"))}
    save(tmp_path / "n.npz", np.eye(3), **xs)
    got = mx.load(str(tmp_path / "n.npz"))
    assert set(got) == {"arr_0", "a", "b", "c"}
    np.testing.assert_array_equal(np.array(got["arr_0"]), np.eye(3))
    for k, v in xs.items():
        np.testing.assert_array_equal(np.array(got[k]), v)


def test_npz_file_object_and_errors(tmp_path):
    buf = io.BytesIO()
    mx.savez(buf, x=mx.array([1.0, 2.0]))
    buf.seek(0)
    assert same(mx.load(buf, format="npz")["x"], mx.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="Cannot use un-named variables and keyword arr_0"):
        mx.savez(str(tmp_path / "e"), mx.array(1), arr_0=mx.array(2))
    with pytest.raises(ValueError, match="metadata not supported for format npz"):
        mx.load(str(tmp_path / "e.npz"), return_metadata=True)


def npz_bytes(compressed):
    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, a=np.arange(100.0))
    return b.getvalue()


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("mutate", [
    lambda b: b[:10],
    lambda b: b"",
    lambda b: b[:-30],                        # truncated central directory / end record
    lambda b: b[:40] + bytes(200) + b[240:],  # corrupt member data
    lambda b: b.replace(b"PK\x05\x06", b"PK\x05\x07"),
])
def test_npz_malformed(tmp_path, compressed, mutate):
    p = tmp_path / "bad.npz"
    p.write_bytes(mutate(npz_bytes(compressed)))
    with pytest.raises((ValueError, RuntimeError)):
        mx.load(str(p))


def test_npz_huge_declared_size(tmp_path):
    raw = bytearray(npz_bytes(True))
    cd = raw.rfind(b"PK\x01\x02")
    raw[cd + 24:cd + 28] = struct.pack("<I", 0xFFFFFFF0)  # uncompressed size
    p = tmp_path / "bomb.npz"
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="declared size"):
        mx.load(str(p))


# ----------------------------------------------------------- safetensors

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_safetensors_roundtrip_metadata(tmp_path):
    arrs = {str(d).split(".")[-1]: mx_sample(d, (2, 5)) for d in ALL}
    arrs["scalar"] = mx.array(3.0, mx.bfloat16)
    arrs["empty"] = mx.zeros((0, 3), mx.float16)
    arrs["strided"] = mx.arange(12).reshape(3, 4).T
    meta = {"format": "mlx", "note": 'quotes " and \\ and \n and é'}
    mx.save_safetensors(str(tmp_path / "w"), arrs, metadata=meta)
    got, md = mx.load(str(tmp_path / "w.safetensors"), return_metadata=True)
    assert md == meta
    assert set(got) == set(arrs)
    for k, v in arrs.items():
        assert same(got[k], v), k
    assert isinstance(mx.load(str(tmp_path / "w.safetensors")), dict)


def test_safetensors_layout_matches_spec(tmp_path):
    a = mx.array([[1.0, 2.0]], mx.bfloat16)
    b = mx.array([True, False, True])
    mx.save_safetensors(str(tmp_path / "s.safetensors"), {"a": a, "b": b})
    raw = (tmp_path / "s.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["a"] == {"dtype": "BF16", "shape": [1, 2], "data_offsets": [0, 4]}
    assert header["b"] == {"dtype": "BOOL", "shape": [3], "data_offsets": [4, 7]}
    data = raw[8 + n:]
    # bfloat16 1.0 = 0x3f80, 2.0 = 0x4000, little-endian
    assert data == b"\x80\x3f\x00\x40\x01\x00\x01"


def test_safetensors_hand_written_file(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.array([1, -2], np.int16)
    header = {"y": {"dtype": "I16", "shape": [2], "data_offsets": [24, 28]},
              "x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24], "extra": [1, {"a": None}]},
              "__metadata__": {"k\u00e9y": "v\\u"}}
    h = json.dumps(header).encode()
    buf = io.BytesIO(struct.pack("<Q", len(h)) + h + x.tobytes() + y.tobytes())
    got, md = mx.load(buf, format="safetensors", return_metadata=True)
    np.testing.assert_array_equal(np.array(got["x"]), x)
    np.testing.assert_array_equal(np.array(got["y"]), y)
    assert md == {"k\u00e9y": "v\\u"}


@pytest.mark.parametrize("meta, want", [
    (None, {}),                 # MLX's save_safetensors without metadata writes null
    ("absent", {}),
    ({}, {}),
    ({"format": "mlx", "n": "2"}, {"format": "mlx", "n": "2"}),
])
def test_safetensors_metadata_null_absent_or_object(meta, want):
    x = np.arange(4, dtype=np.float32)
    header = {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}
    if meta != "absent":
        header["__metadata__"] = meta
    for order in (header, dict(reversed(list(header.items())))):  # before and after the tensors
        h = json.dumps(order).encode()
        got, md = mx.load(io.BytesIO(struct.pack("<Q", len(h)) + h + x.tobytes()), format="safetensors",
                          return_metadata=True)
        np.testing.assert_array_equal(np.array(got["x"]), x)
        assert md == want


@pytest.mark.parametrize("meta", [[1], "x", 3, True, {"a": None}, {"a": {"b": "c"}}])
def test_safetensors_metadata_of_another_kind_is_refused(meta):
    h = json.dumps({"__metadata__": meta}).encode()
    with pytest.raises(RuntimeError, match="__metadata__"):
        mx.load(io.BytesIO(struct.pack("<Q", len(h)) + h), format="safetensors")


def st_file(header, data=b"\x00" * 16):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


@pytest.mark.parametrize("raw", [
    b"\x01\x02",
    struct.pack("<Q", 1 << 60) + b"{}",
    st_file(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'),  # unterminated
    st_file(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}} x'),
    st_file(b"[1, 2]"),
    st_file(b'{"a": "' + b"[" * 10 + b'"}'),
    st_file(b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
    st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}),   # out of range
    st_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}),     # size mismatch
    st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}),
    st_file({"a": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 8]}}),
    st_file({"a": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}),
    st_file({"a": {"dtype": "F32", "shape": [2]}}),
    st_file({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}),
    st_file({"__metadata__": {"a": 1}}),
    st_file(b'{"a\\ud800": 1}'),
])
def test_safetensors_malformed(tmp_path, raw):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(raw)
    with pytest.raises((RuntimeError, ValueError)):
        mx.load(str(p))


def test_safetensors_error_wording(tmp_path):
    p = tmp_path / "w.safetensors"
    p.write_bytes(st_file({"a": {"dtype": "F8_E9", "shape": [2], "data_offsets": [0, 2]}}))
    with pytest.raises(RuntimeError, match=r"\[safetensor\] unsupported dtype F8_E9"):
        mx.load(str(p))
    p.write_bytes(struct.pack("<Q", 0) + b"{}")
    with pytest.raises(RuntimeError, match="Invalid json header length"):
        mx.load(str(p))


def test_save_safetensors_errors(tmp_path):
    with pytest.raises(ValueError, match="Metadata must be a dictionary with string keys and values"):
        mx.save_safetensors(str(tmp_path / "e"), {"a": mx.array(1)}, metadata={"a": 1})
    buf = io.BytesIO()
    mx.save_safetensors(buf, {"a": mx.array([1, 2])})
    buf.seek(0)
    assert same(mx.load(buf, format="safetensors")["a"], mx.array([1, 2]))


def test_npz_crc_checked(tmp_path):
    raw = bytearray(npz_bytes(False))
    at = raw.find(b"\x00\x00\xf0\x3f")  # the 1.0 of arange(100.0), inside stored data
    raw[at + 3] ^= 0x01
    p = tmp_path / "crc.npz"
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="CRC mismatch"):
        mx.load(str(p))


# ------------------------------------------------------------------ GGUF

def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def test_gguf_roundtrip_with_metadata(tmp_path):
    arrs = {"f32": mx_sample(mx.float32, (3, 5)), "f16": mx_sample(mx.float16, (7,)),
            "i8": mx_sample(mx.int8, (2, 3, 4)), "i16": mx_sample(mx.int16, (1, 2)),
            "i32": mx.arange(12).reshape(3, 4).T, "scalar": mx.array(2.5)}
    meta = {"name": "model", "tokens": ["a", "bé", ""], "n": mx.array(7, mx.uint32),
            "v": mx.array([1.5, -2.0]), "flags": mx.array([True, False]), "big": mx.array(2**40, mx.int64)}
    mx.save_gguf(str(tmp_path / "m"), arrs, meta)
    got, md = mx.load(str(tmp_path / "m.gguf"), return_metadata=True)
    assert set(got) == set(arrs)
    for k, v in arrs.items():
        assert same(got[k], v), k
    assert md["name"] == "model" and md["tokens"] == ["a", "bé", ""]
    for k in ("n", "v", "flags", "big"):
        assert same(md[k], meta[k]), k
    assert set(mx.load(str(tmp_path / "m.gguf"))) == set(arrs)


def test_gguf_layout(tmp_path):
    mx.save_gguf(str(tmp_path / "l.gguf"), {"w": mx.array([[1.0, 2.0, 3.0]])}, {"k": "v"})
    raw = (tmp_path / "l.gguf").read_bytes()
    assert raw[:4] == b"GGUF" and struct.unpack("<IQQ", raw[4:24]) == (3, 1, 1)
    kv = gstr("k") + struct.pack("<I", 8) + gstr("v")
    ti = gstr("w") + struct.pack("<IQQIQ", 2, 3, 1, 0, 0)  # dims innermost first, F32, offset 0
    head = raw[:24] + kv + ti
    assert raw.startswith(head)
    data_at = (len(head) + 31) // 32 * 32
    assert raw[data_at:] == np.array([1, 2, 3], np.float32).tobytes()


def gguf_file(tensors=(), kvs=b"", nkv=0, alignment=32, version=3):
    infos, data = b"", b""
    for name, dims, ttype, payload in tensors:
        infos += gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", ttype, len(data))
        data += payload
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), nkv) + kvs + infos
    return head + bytes(-len(head) % alignment) + data


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_gguf_hand_written(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    kvs = (gstr("general.alignment") + struct.pack("<II", 4, 64) + gstr("d") + struct.pack("<Id", 12, 0.5)
           + gstr("arr") + struct.pack("<IIQ", 9, 5, 3) + struct.pack("<3i", 1, -2, 3))
    p = tmp_path / "h.gguf"
    p.write_bytes(gguf_file([("x", (3, 2), 0, x.tobytes())], kvs, 3, alignment=64))
    got, md = mx.load(str(p), return_metadata=True)
    np.testing.assert_array_equal(np.array(got["x"]), x)
    assert md["d"].dtype == mx.float32 and md["d"].item() == 0.5  # float64 values load as float32, as MLX
    assert md["general.alignment"].item() == 64
    assert md["arr"].tolist() == [1, -2, 3]


@pytest.mark.parametrize("raw", [
    b"GGU",
    b"GGUX" + bytes(20),
    b"GGUF" + struct.pack("<IQQ", 9, 0, 0),
    b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 0),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("k") + struct.pack("<IQ", 8, 1 << 50),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("k") + struct.pack("<IIQ", 9, 0, 1 << 50),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("k") + struct.pack("<IIQ", 9, 9, 1),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("k") + struct.pack("<I", 77) + bytes(8),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("general.alignment") + struct.pack("<II", 4, 3),
    gguf_file([("x", (4,), 0, bytes(8))]),                    # data past the end
    gguf_file([("x", (1 << 40, 1 << 40), 0, bytes(8))]),
    gguf_file([("x", (2,), 2, bytes(18))]),                   # Q4_0 with a last dim not a multiple of 32
    gguf_file([("x", (64,), 2, bytes(18))]),                  # Q4_0 data past the end
    gguf_file([("x", (512,), 12, bytes(144))]),               # Q4_K: the second super-block is missing
    gguf_file([("x", (300,), 14, bytes(210))]),               # Q6_K: a partial last block must be whole
    gguf_file([("x", (32,), 11, bytes(144))]),                # Q3_K: not supported
    gguf_file([("x", (2,), 0, bytes(8)), ("x", (2,), 0, bytes(8))]),
    gguf_file([("x", (2,), 0, bytes(8))])[:40],
])
def test_gguf_malformed(tmp_path, raw):
    p = tmp_path / "bad.gguf"
    p.write_bytes(raw)
    with pytest.raises((RuntimeError, ValueError), match=r"\[load_gguf\]"):
        mx.load(str(p))


def test_save_gguf_errors(tmp_path):
    with pytest.raises(RuntimeError, match=r"\[save_gguf\] dtype float64 is not supported"):
        mx.save_gguf(str(tmp_path / "e"), {"a": mx.array([1.0], mx.float64)})
    with pytest.raises(RuntimeError, match="more than one dimension"):
        mx.save_gguf(str(tmp_path / "e"), {}, {"m": mx.zeros((2, 2))})
    with pytest.raises(RuntimeError, match="Cannot save empty arrays"):
        mx.save_gguf(str(tmp_path / "e"), {}, {"m": mx.zeros((0,))})
    with pytest.raises(ValueError, match="not support for metadata"):
        mx.save_gguf(str(tmp_path / "e"), {}, {"m": mx.array([1.0], mx.float16)})
    with pytest.raises(ValueError, match=r"\[save_gguf\] Input must be a string"):
        mx.save_gguf(io.BytesIO(), {})


# ------------------------------------------------------------ mutations

def _valid_files(tmp_path):
    out = []
    b = io.BytesIO()
    mx.save(b, mx.arange(20).reshape(4, 5))
    out.append(("npy", b.getvalue()))
    b = io.BytesIO()
    np.savez_compressed(b, a=np.arange(50.0), b=np.ones((3, 3), ">i2"))
    out.append(("npz", b.getvalue()))
    b = io.BytesIO()
    mx.save_safetensors(b, {"a": mx.ones((3, 4)), "b": mx.array([1, 2])}, {"m": "x"})
    out.append(("safetensors", b.getvalue()))
    mx.save_gguf(str(tmp_path / "v.gguf"), {"a": mx.ones((3, 4))}, {"t": ["a", "b"], "v": mx.array([1, 2])})
    out.append(("gguf", (tmp_path / "v.gguf").read_bytes()))
    return out


def test_random_corruptions_raise_cleanly(tmp_path):
    """Bytes flipped, cut or inserted: every load returns or raises ValueError/RuntimeError
    (checked under valgrind during development: no invalid reads)."""
    rng = np.random.default_rng(5)
    for fmt, raw in _valid_files(tmp_path):
        for _ in range(300):
            r = bytearray(raw)
            for _ in range(int(rng.integers(1, 4))):
                op = rng.random()
                if op < 0.6 and r:
                    r[int(rng.integers(len(r)))] = int(rng.integers(256))
                elif op < 0.8:
                    r = r[:int(rng.integers(len(r) + 1))]
                else:
                    at = int(rng.integers(len(r) + 1))
                    r[at:at] = rng.bytes(int(rng.integers(1, 8)))
            try:
                mx.load(io.BytesIO(bytes(r)), format=fmt)
            except (ValueError, RuntimeError):
                pass


def _mlx_dequantize(w, scales, biases, bits):
    """MLX's affine layout, unpacked independently: element i of a row is bits*(i % per) of
    uint32 word i // per (low bits first)."""
    w = np.array(w).astype(np.uint64)
    per = 32 // bits
    q = (w[..., :, None] >> (bits * np.arange(per, dtype=np.uint64))) & ((1 << bits) - 1)
    q = q.reshape(*w.shape[:-1], -1).astype(np.float32)
    s = np.repeat(np.array(scales).astype(np.float32), 32, axis=-1)
    b = np.repeat(np.array(biases).astype(np.float32), 32, axis=-1)
    return q * s + b


@pytest.mark.parametrize("qtype", [2, 3, 8])
def test_gguf_quantized_blocks(tmp_path, qtype):
    """GGML's Q4_0 / Q4_1 / Q8_0 blocks load as MLX's (weight, scales, biases) triplet."""
    rng = np.random.default_rng(qtype)
    rows, cols = 3, 64
    blocks, want = b"", []
    for _ in range(rows * cols // 32):
        d = np.float16(rng.uniform(0.01, 1))
        if qtype == 8:
            q = rng.integers(-128, 128, 32).astype(np.int8)
            blocks += d.tobytes() + q.tobytes()
            want.append(np.float32(d) * q.astype(np.float32))
            continue
        q = rng.integers(0, 16, 32).astype(np.uint8)
        packed = (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()  # GGML: j low, j + 16 high
        if qtype == 2:
            blocks += d.tobytes() + packed
            want.append(np.float32(d) * (q.astype(np.float32) - 8))
        else:
            m = np.float16(rng.uniform(-1, 1))
            blocks += d.tobytes() + m.tobytes() + packed
            want.append(np.float32(d) * q.astype(np.float32) + np.float32(m))
    p = tmp_path / "q.gguf"
    p.write_bytes(gguf_file([("blk.0.weight", (cols, rows), qtype, blocks)]))
    got = mx.load(str(p))
    assert set(got) == {"blk.0.weight", "blk.0.scales", "blk.0.biases"}
    bits = 8 if qtype == 8 else 4
    w, s, b = got["blk.0.weight"], got["blk.0.scales"], got["blk.0.biases"]
    assert w.dtype == mx.uint32 and w.shape == (rows, cols * bits // 32)
    assert s.dtype == b.dtype == mx.float16 and s.shape == b.shape == (rows, cols // 32)
    np.testing.assert_allclose(_mlx_dequantize(w, s, b, bits),
                               np.concatenate(want).reshape(rows, cols), rtol=2e-3, atol=2e-3)


def _q4k_blocks(rng, n):
    """n Q4_K super-blocks (GGML's layout) and the 8 scales and mins of each."""
    blocks, meta = b"", []
    for _ in range(n):
        d, dmin = np.float16(rng.uniform(0.01, 0.1)), np.float16(rng.uniform(0.01, 0.1))
        sc, mn = rng.integers(0, 64, 8), rng.integers(0, 64, 8)
        packed = bytearray(12)  # GGML's 6-bit packing of 8 scales and 8 mins
        for j in range(4):
            packed[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
            packed[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6)
            packed[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4)
        q = rng.integers(0, 16, 256).astype(np.uint8)
        qs = b""
        for c in range(4):  # 64 weights per 32 bytes: 32 in the low nibbles, 32 in the high
            lo, hi = q[64 * c:64 * c + 32], q[64 * c + 32:64 * c + 64]
            qs += (lo | (hi << 4)).astype(np.uint8).tobytes()
        blocks += d.tobytes() + dmin.tobytes() + bytes(packed) + qs
        meta.append((d, dmin, sc, mn, q))
    return blocks, meta


def test_gguf_q4_k_loads_as_float16(tmp_path):
    # MLX loads Q4_K dequantized to float16 (gguflib's gguf_tensor_to_f16),
    # where both 32-weight halves of a 32-byte run take the scale and min of
    # the even sub-block (GGML's reference gives the odd half its own)
    rng = np.random.default_rng(12)
    rows, cols = 2, 256
    blocks, meta = _q4k_blocks(rng, rows)
    want = []
    for d, dmin, sc, mn, q in meta:
        for j in range(8):
            e = j & ~1
            w = q[32 * j:32 * j + 32].astype(np.float32) * (np.float32(sc[e]) * np.float32(d))
            want.append((w - np.float32(mn[e]) * np.float32(dmin)).astype(np.float16))
    p = tmp_path / "k.gguf"
    p.write_bytes(gguf_file([("w.weight", (cols, rows), 12, blocks)]))
    got = mx.load(str(p))
    assert set(got) == {"w.weight"}
    w = got["w.weight"]
    assert w.dtype == mx.float16 and w.shape == (rows, cols)
    assert np.array_equal(np.array(w), np.concatenate(want).reshape(rows, cols))


def test_gguf_q6_k_and_q2_k_load_as_float16(tmp_path):
    rng = np.random.default_rng(5)
    # Q6_K: 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d
    ql = rng.integers(0, 256, 128).astype(np.uint8)
    qh = rng.integers(0, 256, 64).astype(np.uint8)
    scales = rng.integers(-128, 128, 16).astype(np.int8)
    d = np.float16(0.03125)
    q6 = np.zeros(256, np.int64)
    for h in range(2):
        for j in range(128):
            lo = (ql[64 * h + j % 64] >> (4 * (j // 64))) & 15
            hi = (qh[32 * h + j % 32] >> (2 * (j // 32))) & 3
            q6[128 * h + j] = lo | (hi << 4)
    s = np.float32(d) * scales.astype(np.float32)[np.arange(256) // 16]
    want6 = (s * (q6 - 32).astype(np.float32)).astype(np.float16)
    raw6 = ql.tobytes() + qh.tobytes() + scales.tobytes() + d.tobytes()
    # Q2_K: 16 bytes (min << 4 | scale), 64 bytes of 2-bit values, f16 d, f16 dmin
    sm = rng.integers(0, 256, 16).astype(np.uint8)
    qs = rng.integers(0, 256, 64).astype(np.uint8)
    d2, m2 = np.float16(0.0625), np.float16(0.015625)
    j = np.arange(256)
    q2 = (qs[32 * (j // 128) + j % 32] >> (2 * ((j % 128) // 32))) & 3
    sc = np.float32(d2) * (sm[j // 16] & 15).astype(np.float32)
    mn = np.float32(m2) * (sm[j // 16] >> 4).astype(np.float32)
    want2 = (q2.astype(np.float32) * sc - mn).astype(np.float16)
    raw2 = sm.tobytes() + qs.tobytes() + d2.tobytes() + m2.tobytes()
    bf = np.array([1.5, -2.25, 3e-3, 65504.0], np.float32)
    rawb = (bf.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    p = tmp_path / "k.gguf"
    p.write_bytes(gguf_file([("a", (256,), 14, raw6), ("b", (128, 2), 10, raw2), ("c", (4,), 30, rawb)]))
    got = mx.load(str(p))
    assert all(v.dtype == mx.float16 for v in got.values())
    assert np.array_equal(np.array(got["a"]), want6)
    assert got["b"].shape == (2, 128) and np.array_equal(np.array(got["b"]).reshape(-1), want2)
    bf16_vals = (np.frombuffer(rawb, np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(np.array(got["c"]), bf16_vals.astype(np.float16))
    # a partial last block: the leading weights of a whole block
    p.write_bytes(gguf_file([("a", (100,), 14, raw6)]))
    assert np.array_equal(np.array(mx.load(str(p))["a"]), want6[:100])


@pytest.mark.parametrize("t,name", [(6, "Q5_0"), (7, "Q5_1"), (11, "Q3_K"), (13, "Q5_K"), (15, "Q8_K"),
                                    (27, "I64"), (28, "F64"), (77, "unknown")])
def test_gguf_types_mlx_does_not_load(tmp_path, t, name):
    p = tmp_path / "u.gguf"
    p.write_bytes(gguf_file([("x", (256,), t, bytes(2048))]))
    with pytest.raises(RuntimeError, match=r"\[load_gguf\] gguf_tensor_to_f16 failed: tensor 'x' has GGUF type "
                                           + str(t) + r" \(" + name + r"\)"):
        mx.load(str(p))


@pytest.mark.parametrize("dt", [mx.bfloat16, mx.uint8, mx.int64, mx.float64, mx.bool_, mx.complex64])
def test_save_gguf_refuses_dtypes_mlx_refuses(tmp_path, dt):
    with pytest.raises(RuntimeError, match=r"\[save_gguf\] dtype .* is not supported"):
        mx.save_gguf(str(tmp_path / "x.gguf"), {"a": mx.ones((2,), dtype=dt, stream=mx.cpu)})


# ------------------------------------------------------------------- lazy data, fp8

def test_npy_truncated_data_raises_on_eval_not_on_load(tmp_path):
    p = tmp_path / "t.npy"
    p.write_bytes(npy_bytes(np.arange(16, dtype=np.float32))[:-64])
    a = mx.load(str(p))                      # the header is fine: shape and dtype are known
    assert a.shape == (16,) and a.dtype == mx.float32
    with pytest.raises(RuntimeError, match="truncated"):
        mx.eval(a + 1)
    with pytest.raises(RuntimeError, match="truncated"):  # every later use fails the same way
        a.tolist()


def test_safetensors_fp8_loads_as_bytes(tmp_path):
    import json, struct
    codes = bytes([0x00, 0x7E, 0xFE, 0xB6, 0x2E, 0x38, 0x40, 0x01])
    for name in ("F8_E4M3", "F8_E8M0"):
        hdr = json.dumps({"w": {"dtype": name, "shape": [2, 4], "data_offsets": [0, 8]}}).encode()
        p = tmp_path / f"{name}.safetensors"
        p.write_bytes(struct.pack("<Q", len(hdr)) + hdr + codes)
        w = mx.load(str(p))["w"]
        assert w.dtype == mx.uint8 and w.shape == (2, 4)
        assert np.array(w).tobytes() == codes
    # e4m3 decoded by the definition: sign, 4 exponent bits (bias 7), 3 mantissa bits
    def e4m3(c):
        s = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 15, c & 7
        return s * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    got = np.array(mx.from_fp8(mx.load(str(tmp_path / "F8_E4M3.safetensors"))["w"], mx.float32))
    assert np.array_equal(got.ravel(), np.array([e4m3(c) for c in codes], np.float32))


def test_npy_load_is_lazy_and_its_buffer_is_donated(tmp_path):
    # as MLX's Load: the data is read when the array is evaluated, so an op
    # on a loaded array that nothing else holds reuses its buffer
    f = str(tmp_path / "don.npy")
    x = mx.arange(1024, dtype=mx.float32)
    mx.save(f, x)
    scale = mx.array(2.0)
    mx.eval(scale)
    mx.reset_peak_memory()
    y = mx.load(f)
    mx.eval(y)
    load_only = mx.get_peak_memory()
    y = mx.load(f) * scale
    mx.eval(y)
    assert mx.get_peak_memory() == load_only
    assert y.tolist() == [2.0 * i for i in range(1024)]
    # the node keeps the bytes: the file may go before the eval
    z = mx.load(f)
    os.remove(f)
    assert (z + 1).tolist() == [i + 1.0 for i in range(1024)]
    assert z.tolist() == list(range(1024))
