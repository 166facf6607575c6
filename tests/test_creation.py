"""Creation ops against NumPy and MLX 0.32: zeros, ones, full and the _like
forms, arange, linspace, eye, identity, tri, tril, triu. Values MLX computes
with its own arithmetic are baked in from real MLX (no MLX import here)."""
import numpy as np
import pytest

import mkpy as mx

DTYPES = [mx.float32, mx.float16, mx.bfloat16, mx.float64, mx.int32, mx.int64, mx.int8, mx.uint8,
          mx.uint32, mx.bool_, mx.complex64]
NP = {mx.float32: np.float32, mx.float16: np.float16, mx.bfloat16: np.float32, mx.float64: np.float64,
      mx.int32: np.int32, mx.int64: np.int64, mx.int8: np.int8, mx.uint8: np.uint8, mx.uint32: np.uint32,
      mx.bool_: np.bool_, mx.complex64: np.complex64, mx.uint64: np.uint64, mx.int16: np.int16,
      mx.uint16: np.uint16}


def to_np(a):
    return np.array(a.tolist(), dtype=NP[a.dtype]).reshape(a.shape)


def check(a, expected, dtype=None):
    expected = np.asarray(expected)
    assert tuple(a.shape) == expected.shape
    if dtype is not None:
        assert a.dtype == dtype
    np.testing.assert_array_equal(to_np(a), expected.astype(NP[a.dtype]))


def _plain(v):
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, complex):
        return [v.real, v.imag]
    return v


# Values from MLX 0.32.4 where its arithmetic matters: arange accumulates start + step
# in the output dtype (float16 stalls at 2048), integer dtypes take the double -> int
# conversions of x86-64, linspace is (1 - t) * start + t * stop in float32.
MLX_VALUES = {
    'arange_f32_tenth': ('mx.arange(0, 1, 0.1)', 'float32', (10,),
        [0.0, 0.10000000149011612, 0.20000000298023224, 0.30000001192092896, 0.4000000059604645, 0.5,
         0.6000000238418579, 0.7000000476837158, 0.8000000715255737, 0.9000000953674316]),
    'arange_f32_long': ('mx.arange(0, 3, 0.1)', 'float32', (30,),
        [0.0, 0.10000000149011612, 0.20000000298023224, 0.30000001192092896, 0.4000000059604645, 0.5,
         0.6000000238418579, 0.7000000476837158, 0.8000000715255737, 0.9000000953674316, 1.0000001192092896,
         1.1000001430511475, 1.2000001668930054, 1.3000001907348633, 1.4000002145767212, 1.500000238418579,
         1.600000262260437, 1.700000286102295, 1.8000003099441528, 1.9000003337860107, 2.000000238418579,
         2.1000001430511475, 2.200000047683716, 2.299999952316284, 2.3999998569488525, 2.499999761581421,
         2.5999996662139893, 2.6999995708465576, 2.799999475479126, 2.8999993801116943]),
    'arange_f32_neg': ('mx.arange(-1.5, 2.5, 0.3)', 'float32', (14,),
        [-1.5, -1.2000000476837158, -0.9000000953674316, -0.6000001430511475, -0.3000001907348633,
         -2.384185791015625e-07, 0.2999997138977051, 0.5999996662139893, 0.8999996185302734,
         1.1999995708465576, 1.4999995231628418, 1.799999475479126, 2.09999942779541, 2.3999993801116943]),
    'arange_f32_from1': ('mx.arange(1, 2, 0.01)', 'float32', (100,),
        [1.0, 1.0099999904632568, 1.0199999809265137, 1.0299999713897705, 1.0399999618530273,
         1.0499999523162842, 1.059999942779541, 1.0699999332427979, 1.0799999237060547, 1.0899999141693115,
         1.0999999046325684, 1.1099998950958252, 1.119999885559082, 1.1299998760223389, 1.1399998664855957,
         1.1499998569488525, 1.1599998474121094, 1.1699998378753662, 1.179999828338623, 1.1899998188018799,
         1.1999998092651367, 1.2099997997283936, 1.2199997901916504, 1.2299997806549072, 1.239999771118164,
         1.249999761581421, 1.2599997520446777, 1.2699997425079346, 1.2799997329711914, 1.2899997234344482,
         1.299999713897705, 1.309999704360962, 1.3199996948242188, 1.3299996852874756, 1.3399996757507324,
         1.3499996662139893, 1.359999656677246, 1.369999647140503, 1.3799996376037598, 1.3899996280670166,
         1.3999996185302734, 1.4099996089935303, 1.419999599456787, 1.429999589920044, 1.4399995803833008,
         1.4499995708465576, 1.4599995613098145, 1.4699995517730713, 1.4799995422363281, 1.489999532699585,
         1.4999995231628418, 1.5099995136260986, 1.5199995040893555, 1.5299994945526123, 1.5399994850158691,
         1.549999475479126, 1.5599994659423828, 1.5699994564056396, 1.5799994468688965, 1.5899994373321533,
         1.5999994277954102, 1.609999418258667, 1.6199994087219238, 1.6299993991851807, 1.6399993896484375,
         1.6499993801116943, 1.6599993705749512, 1.669999361038208, 1.6799993515014648, 1.6899993419647217,
         1.6999993324279785, 1.7099993228912354, 1.7199993133544922, 1.729999303817749, 1.7399992942810059,
         1.7499992847442627, 1.7599992752075195, 1.7699992656707764, 1.7799992561340332, 1.78999924659729,
         1.7999992370605469, 1.8099992275238037, 1.8199992179870605, 1.8299992084503174, 1.8399991989135742,
         1.849999189376831, 1.859999179840088, 1.8699991703033447, 1.8799991607666016, 1.8899991512298584,
         1.8999991416931152, 1.909999132156372, 1.919999122619629, 1.9299991130828857, 1.9399991035461426,
         1.9499990940093994, 1.9599990844726562, 1.969999074935913, 1.97999906539917, 1.9899990558624268]),
    'arange_f64_tenth': ('mx.arange(0, 1, 0.1, dtype=mx.float64)', 'float64', (10,),
        [0.0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5, 0.6, 0.7, 0.7999999999999999, 0.8999999999999999]),
    'arange_f16_frac': ('mx.arange(0.1, 3, 0.7, mx.float16)', 'float16', (5,),
        [0.0999755859375, 0.7998046875, 1.5, 2.19921875, 2.8984375]),
    'arange_bf16_frac': ('mx.arange(0.1, 30, 0.7, mx.bfloat16)', 'bfloat16', (43,),
        [0.10009765625, 0.80078125, 1.5, 2.203125, 2.90625, 3.609375, 4.3125, 5.0, 5.6875, 6.375, 7.0625,
         7.75, 8.4375, 9.125, 9.8125, 10.5, 11.1875, 11.875, 12.5625, 13.25, 13.9375, 14.625, 15.3125, 16.0,
         16.75, 17.5, 18.25, 19.0, 19.75, 20.5, 21.25, 22.0, 22.75, 23.5, 24.25, 25.0, 25.75, 26.5, 27.25,
         28.0, 28.75, 29.5, 30.25]),
    'arange_f16_stall': ('mx.arange(0, 3000, dtype=mx.float16)[2040:2060]', 'float16', (20,),
        [2040.0, 2041.0, 2042.0, 2043.0, 2044.0, 2045.0, 2046.0, 2047.0, 2048.0, 2048.0, 2048.0, 2048.0,
         2048.0, 2048.0, 2048.0, 2048.0, 2048.0, 2048.0, 2048.0, 2048.0]),
    'arange_bf16_stall': ('mx.arange(0, 3000, dtype=mx.bfloat16)[250:270]', 'bfloat16', (20,),
        [250.0, 251.0, 252.0, 253.0, 254.0, 255.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0,
         256.0, 256.0, 256.0, 256.0, 256.0, 256.0]),
    'arange_big_f32': ('mx.arange(1e10, 1e10 + 3, 1, mx.float32)', 'float32', (3,),
        [10000000000.0, 10000000000.0, 10000000000.0]),
    'arange_u8_neg': ('mx.arange(-3, 7, 2, dtype=mx.uint8)', 'uint8', (5,),
        [253, 255, 1, 3, 5]),
    'arange_u8_over': ('mx.arange(300, 305, 1, mx.uint8)', 'uint8', (5,),
        [44, 45, 46, 47, 48]),
    'arange_u16_neg': ('mx.arange(-5, 5, 3, mx.uint16)', 'uint16', (4,),
        [65531, 65534, 1, 4]),
    'arange_u32_neg': ('mx.arange(-5, 5, 3, mx.uint32)', 'uint32', (4,),
        [4294967291, 4294967294, 1, 4]),
    'arange_u64_neg': ('mx.arange(-5, 5, 3, mx.uint64)', 'uint64', (4,),
        [18446744073709551611, 18446744073709551614, 1, 4]),
    'arange_i32_over': ('mx.arange(3e9, 3e9 + 3, 1, mx.int32)', 'int32', (3,),
        [-2147483648, -2147483648, -2147483648]),
    'arange_i8_wrap': ('mx.arange(0, 300, 1, dtype=mx.int8)[120:140]', 'int8', (20,),
        [120, 121, 122, 123, 124, 125, 126, 127, -128, -127, -126, -125, -124, -123, -122, -121, -120, -119,
         -118, -117]),
    'arange_int_float_args': ('mx.arange(0.5, 7.7, 1.7, dtype=mx.int32)', 'int32', (5,),
        [0, 2, 4, 6, 8]),
    'arange_c64': ('mx.arange(0.5, 3, 1, mx.complex64)', 'complex64', (3,),
        [[0.5, 0.0], [1.5, 0.0], [2.5, 0.0]]),
    'arange_i64_infer': ('mx.arange(2**31 - 2, 2**31 + 1)', 'int64', (3,),
        [2147483646, 2147483647, 2147483648]),
    'arange_inf_step': ("mx.arange(0, 5, float('inf'))", 'float32', (1,),
        [0.0]),
    'linspace_50': ('mx.linspace(0, 1)', 'float32', (50,),
        [0.0, 0.020408162847161293, 0.040816325694322586, 0.06122449040412903, 0.08163265138864517,
         0.10204081982374191, 0.12244898080825806, 0.1428571492433548, 0.16326530277729034,
         0.18367347121238708, 0.20408163964748383, 0.22448979318141937, 0.2448979616165161,
         0.26530611515045166, 0.2857142984867096, 0.30612245202064514, 0.3265306055545807,
         0.3469387888908386, 0.36734694242477417, 0.3877550959587097, 0.40816327929496765,
         0.4285714328289032, 0.44897958636283875, 0.4693877696990967, 0.4897959232330322,
         0.5102040767669678, 0.5306122303009033, 0.5510203838348389, 0.5714285969734192, 0.5918367505073547,
         0.6122449040412903, 0.6326530575752258, 0.6530612111091614, 0.6734693646430969, 0.6938775777816772,
         0.7142857313156128, 0.7346938848495483, 0.7551020383834839, 0.7755101919174194, 0.795918345451355,
         0.8163265585899353, 0.8367347121238708, 0.8571428656578064, 0.8775510191917419, 0.8979591727256775,
         0.918367326259613, 0.9387755393981934, 0.9591836929321289, 0.9795918464660645, 1.0]),
    'linspace_odd': ('mx.linspace(-3.3, 17.1, 11)', 'float32', (11,),
        [-3.299999952316284, -1.2599997520446777, 0.7799999713897705, 2.820000171661377, 4.860000133514404,
         6.900000095367432, 8.940000534057617, 10.980000495910645, 13.020000457763672, 15.0600004196167,
         17.100000381469727]),
    'linspace_noend': ('mx.linspace(-3.3, 17.1, 11, endpoint=False)', 'float32', (11,),
        [-3.299999952316284, -1.4454542398452759, 0.4090909957885742, 2.263636589050293, 4.118182182312012,
         5.9727277755737305, 7.827273368835449, 9.681818008422852, 11.536364555358887, 13.390909194946289,
         15.245454788208008]),
    'linspace_f64': ('mx.linspace(0.1, 10.3, 7, dtype=mx.float64)', 'float64', (7,),
        [0.1, 1.8, 3.5000000000000004, 5.2, 6.9, 8.600000000000001, 10.3]),
    'linspace_f16': ('mx.linspace(0, 10, 7, dtype=mx.float16)', 'float16', (7,),
        [0.0, 1.6669921875, 3.333984375, 5.0, 6.66796875, 8.3359375, 10.0]),
    'linspace_int': ('mx.linspace(0, 10, 5, dtype=mx.int32)', 'int32', (5,),
        [0, 2, 5, 7, 10]),
    'linspace_one': ('mx.linspace(0.1, 10, 1, dtype=mx.float64)', 'float64', (1,),
        [0.10000000149011612]),
    'linspace_rev': ('mx.linspace(10, -10, 9)', 'float32', (9,),
        [10.0, 7.5, 5.0, 2.5, 0.0, -2.5, -5.0, -7.5, -10.0]),
}


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name", sorted(MLX_VALUES))
def test_values_as_mlx(name):
    expr, dtype, shape, values = MLX_VALUES[name]
    a = eval(expr, {"mx": mx})
    assert str(a.dtype).split(".")[-1] == dtype
    assert tuple(a.shape) == shape
    assert _plain(a.tolist()) == values


# --------------------------------------------------------- zeros, ones, full

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_zeros_ones(dtype):
    for shape in [(2, 3), (0, 4), (), (5,), (1, 2, 1, 3)]:
        check(mx.zeros(shape, dtype), np.zeros(shape), dtype)
        check(mx.ones(shape, dtype), np.ones(shape), dtype)
    check(mx.zeros(3), np.zeros(3), mx.float32)
    check(mx.ones([2, 2], dtype=None), np.ones((2, 2)), mx.float32)


def test_zeros_large_parallel():
    a = mx.full((1000, 1003), 2.5, mx.float16)
    assert np.all(to_np(a) == 2.5)
    b = mx.zeros((700, 900), mx.complex64)
    assert not np.any(to_np(b))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_full_scalar_with_dtype(dtype):
    a = mx.full((2, 3), 1, dtype)
    expected_dtype = mx.int32 if dtype == mx.bool_ else dtype  # MLX: ints never become bool
    check(a, np.ones((2, 3)), expected_dtype)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_full_dtype_rules():
    # MLX's to_array(vals, dtype): a float only takes floating dtypes, an
    # array keeps its own dtype
    assert mx.full((2,), 7).dtype == mx.int32
    assert mx.full((2,), 7.5).dtype == mx.float32
    assert mx.full((2,), True).dtype == mx.bool_
    assert mx.full((2,), 1 + 2j).dtype == mx.complex64
    assert mx.full((2,), 2**40).dtype == mx.int64
    check(mx.full((2,), 7.5, mx.int32), [7.5, 7.5], mx.float32)
    check(mx.full((2,), 7.5, mx.float16), [7.5, 7.5], mx.float16)
    check(mx.full((2,), mx.array(7.5), mx.int32), [7.5, 7.5], mx.float32)
    check(mx.full((2,), True, mx.int32), [1, 1], mx.int32)
    check(mx.full((2,), -1, mx.uint64), [2**64 - 1] * 2, mx.uint64)
    assert mx.full((2,), 0.1, mx.float64).tolist() == [0.1, 0.1]
    check(mx.full((2,), np.int64(3)), [3, 3], mx.int64)


def test_full_broadcast():
    check(mx.full((2, 3), mx.array([1, 2, 3])), [[1, 2, 3], [1, 2, 3]], mx.int32)
    check(mx.full((2, 2, 2), mx.array([[1.5], [2.5]], mx.float16)), np.broadcast_to([[1.5], [2.5]], (2, 2, 2)),
          mx.float16)
    src = mx.array([[1, 2, 3], [4, 5, 6]], mx.int16)[:, ::-2]  # non-contiguous
    check(mx.full((3, 2, 2), src), np.broadcast_to([[3, 1], [6, 4]], (3, 2, 2)), mx.int16)
    check(mx.full((2, 3), mx.array([1, 2, 3]).astype(mx.bfloat16)), [[1, 2, 3]] * 2, mx.bfloat16)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_like(dtype):
    x = mx.ones((2, 3), dtype)
    check(mx.zeros_like(x), np.zeros((2, 3)), dtype)
    check(mx.ones_like(x), np.ones((2, 3)), dtype)
    check(mx.zeros_like(x, mx.float16), np.zeros((2, 3)), mx.float16)
    check(mx.ones_like(x, dtype=mx.int8), np.ones((2, 3)), mx.int8)
    check(mx.full_like(x, 1), np.ones((2, 3)), dtype)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_full_like():
    i = mx.ones((2, 2), mx.int32)
    check(mx.full_like(i, 2.7), [[2, 2], [2, 2]], mx.int32)
    check(mx.full_like(i, 2.7, mx.float32), np.full((2, 2), np.float32(2.7)), mx.float32)
    check(mx.full_like(i, mx.array(7.5)), [[7, 7], [7, 7]], mx.int32)
    check(mx.full_like(mx.ones((2,), mx.bool_), 7), [True, True], mx.bool_)
    check(mx.full_like(mx.ones((2,), mx.float16), 7.123456), [7.125, 7.125], mx.float16)
    # the result takes the broadcast of a's shape and vals' shape
    check(mx.full_like(mx.ones((2, 1), mx.int32), mx.array([1.5, 2, 3])), [[1, 2, 3]] * 2, mx.int32)
    check(mx.full_like(mx.ones(3), mx.array([[1], [2]])), [[1, 1, 1], [2, 2, 2]], mx.float32)
    assert mx.full_like(mx.zeros(2, mx.float64), 0.1).tolist() == [0.1, 0.1]


# ------------------------------------------------------------------ arange

def test_arange_vs_numpy_ints():
    for args in [(5,), (1, 5), (0, 10, 3), (10, 0, -3), (0, 10, -1), (-7, 7, 3), (5, 2), (0,)]:
        check(mx.arange(*args), np.arange(*args), mx.int32)


def test_arange_vs_numpy_floats():
    for args in [(5.0,), (1, 5.0), (0, 10, 2.5), (-5, -10, -1.5), (0, 1, 0.25), (3.0, 2)]:
        a = mx.arange(*args)
        assert a.dtype == mx.float32
        np.testing.assert_allclose(to_np(a), np.arange(*args), rtol=1e-6)


@pytest.mark.parametrize("dtype", [mx.int8, mx.uint8, mx.int16, mx.int32, mx.int64, mx.uint32, mx.float16,
                                   mx.bfloat16, mx.float32, mx.float64, mx.complex64])
@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_arange_dtypes(dtype):
    a = mx.arange(1, 40, 3, dtype)
    check(a, np.arange(1, 40, 3), dtype)
    assert mx.arange(0, 0, 1, dtype).shape == (0,)


def test_arange_dtype_inference():
    assert mx.arange(5).dtype == mx.int32
    assert mx.arange(5.0).dtype == mx.float32
    assert mx.arange(1, 5.0).dtype == mx.float32
    assert mx.arange(0, 10, 2.5).dtype == mx.float32
    assert mx.arange(True, 5).dtype == mx.int32
    assert mx.arange(2**40, 2**40 + 3).dtype == mx.int64
    assert mx.arange(-2**31 - 1, -2**31 + 2).dtype == mx.int64
    assert mx.arange(0, 5, 2**33).dtype == mx.int64
    assert mx.arange(0, 5, dtype=mx.int64).dtype == mx.int64
    assert mx.arange(0, 5, 1, None).dtype == mx.int32


def test_arange_overloads():
    check(mx.arange(stop=4), [0, 1, 2, 3])
    check(mx.arange(start=1, stop=4), [1, 2, 3])
    check(mx.arange(1, 4, step=2), [1, 3])
    check(mx.arange(5, step=2), [0, 2, 4])
    check(mx.arange(1, 4, None), [1, 2, 3])
    check(mx.arange(1, None), [0])  # stop None: arange(0, start)
    check(mx.arange(1, 7, 2, mx.int8), [1, 3, 5], mx.int8)
    check(mx.arange(0.5, 7, 1.5, dtype=mx.int32), [0, 2, 4, 6, 8], mx.int32)
    assert mx.arange(0, 5, float("inf")).tolist() == [0.0]
    assert mx.arange(0, -5, float("inf")).tolist() == []
    assert mx.arange(0, 5, float("-inf")).tolist() == []


def test_arange_large_parallel():
    a = mx.arange(0, 3000000, 1, mx.int32)
    v = to_np(a)
    assert v[0] == 0 and v[-1] == 2999999 and np.all(np.diff(v) == 1)
    b = mx.arange(10, -2000000, -3, mx.int64)
    np.testing.assert_array_equal(to_np(b), np.arange(10, -2000000, -3))


def test_arange_errors():
    errs = [
        (lambda: mx.arange(0, 10, 0), "[arange] step must be nonzero."),
        (lambda: mx.arange(0, 0, 0), "[arange] step must be nonzero."),
        (lambda: mx.arange(0, 10, dtype=mx.bool_), "bool not supported for arange."),
        (lambda: mx.arange(0, 1, 0, dtype=mx.bool_), "bool not supported for arange."),
        (lambda: mx.arange(float("nan")), "[arange] Cannot compute length."),
        (lambda: mx.arange(float("inf")), "[arange] Cannot compute length."),
        (lambda: mx.arange(0, 1, float("nan")), "[arange] Cannot compute length."),
        (lambda: mx.arange(2**31 + 5), "[arange] Maximum size exceeded."),
        (lambda: mx.arange(1e300), "[arange] Maximum size exceeded."),
        (lambda: mx.arange(0, 1, 1e-12), "[arange] Maximum size exceeded."),
    ]
    for f, msg in errs:
        with pytest.raises(ValueError) as e:
            f()
        assert str(e.value) == msg
    for f in (lambda: mx.arange("a"), lambda: mx.arange(), lambda: mx.arange(mx.array(3)),
              lambda: mx.arange(1, 2, 3, 4)):
        with pytest.raises(TypeError):
            f()


# ---------------------------------------------------------------- linspace

def test_linspace_vs_numpy():
    for args in [(0, 1, 50), (0, 1, 7), (-3.3, 17.1, 101), (1e-3, 1e3, 33), (5, 5, 4), (10, -10, 21), (2, 3, 2),
                 (1.5, 2.5, 0), (0, 10, 1)]:
        a = mx.linspace(*args)
        e = np.linspace(*args)
        assert a.dtype == mx.float32 and a.shape == e.shape
        np.testing.assert_allclose(to_np(a), e, rtol=1e-6, atol=1e-5)
        if args[2] > 1:  # exact endpoints
            v = to_np(a)
            assert v[0] == np.float32(args[0]) and v[-1] == np.float32(args[1])
    np.testing.assert_allclose(to_np(mx.linspace(0, 1, 7, endpoint=False)), np.linspace(0, 1, 7, endpoint=False),
                               rtol=1e-6)


def test_linspace_is_mlx_formula():
    # (1 - t) * start + t * stop, t = i / (num - 1), all in float32
    n, s, e = 1001, np.float32(-1.7), np.float32(2.9)
    t = np.arange(n, dtype=np.float32) / np.float32(n - 1)
    expected = (np.float32(1) - t) * s + t * e
    np.testing.assert_array_equal(to_np(mx.linspace(-1.7, 2.9, n)), expected)
    big = to_np(mx.linspace(-3, 7, 2000001))
    t = np.arange(2000001, dtype=np.float32) / np.float32(2000000)
    np.testing.assert_array_equal(big, (np.float32(1) - t) * np.float32(-3) + t * np.float32(7))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float64, mx.int32, mx.bool_, mx.complex64])
def test_linspace_dtypes(dtype):
    a = mx.linspace(0, 10, 5, dtype=dtype)
    assert a.dtype == dtype
    check(a, np.linspace(0, 10, 5).astype(np.float32).astype(NP[dtype]))


def test_linspace_args_and_errors():
    check(mx.linspace(0, 10, 5, False, mx.float32), [0, 2, 4, 6, 8])
    check(mx.linspace(mx.array(0.0), 10, 5), [0, 2.5, 5, 7.5, 10])
    assert mx.linspace(0, 10, dtype=None).shape == (50,)
    with pytest.raises(ValueError) as e:
        mx.linspace(0, 10, -1)
    assert str(e.value) == "[linspace] number of samples, -1, must be non-negative."
    for f in (lambda: mx.linspace(0, 10, None), lambda: mx.linspace(0, 10, 5.0), lambda: mx.linspace(1 + 2j, 10, 5)):
        with pytest.raises(TypeError):
            f()


# ------------------------------------------------------- eye, identity, tri

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_eye_identity(dtype):
    for n, m, k in [(3, None, 0), (3, 4, 1), (3, 4, -2), (3, 4, 5), (3, 4, -5), (0, None, 0), (3, 0, 0),
                    (5, 2, -1), (1, 1, 0)]:
        check(mx.eye(n, m, k, dtype), np.eye(n, m, k), dtype)
    check(mx.identity(4, dtype), np.identity(4), dtype)
    check(mx.eye(3), np.eye(3), mx.float32)
    check(mx.eye(3, dtype=None), np.eye(3), mx.float32)
    check(mx.identity(0), np.identity(0), mx.float32)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_tri(dtype):
    for n, m, k in [(3, None, 0), (3, 4, 1), (4, 3, -1), (2, 3, -5), (3, 5, 10), (0, None, 0), (1, 6, 2)]:
        check(mx.tri(n, m, k, dtype), np.tri(n, m, k), dtype)
    check(mx.tri(3), np.tri(3), mx.float32)
    check(mx.tri(3, dtype=None), np.tri(3), mx.float32)
    assert mx.tri(-1).shape == (0, 0) and mx.tri(3, -2).shape == (3, 0)


def test_eye_tri_large():
    check(mx.eye(1500, 1700, 3), np.eye(1500, 1700, 3))
    check(mx.tri(600, 700, -4, mx.int8), np.tri(600, 700, -4))


def test_eye_errors():
    for f in (lambda: mx.eye(-1), lambda: mx.identity(-2), lambda: mx.eye(2, -1)):
        with pytest.raises(ValueError) as e:
            f()
        assert str(e.value) == "[eye] N and M must be positive integers."
    for f in (lambda: mx.eye(3.0), lambda: mx.tri(2.5), lambda: mx.eye(3, k=None)):
        with pytest.raises(TypeError):
            f()


# -------------------------------------------------------------- tril, triu

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu_dtypes(dtype):
    base = np.arange(1, 25).reshape(2, 3, 4)
    x = mx.array(base.tolist(), dtype)
    for k in (-10, -2, -1, 0, 1, 3, 10):
        check(mx.tril(x, k), np.tril(base, k), dtype)
        check(mx.triu(x, k), np.triu(base, k), dtype)


def test_tril_triu_non_contiguous():
    base = np.arange(1, 61, dtype=np.float32).reshape(3, 4, 5)
    x = mx.array(base.tolist())
    views = [(x.T, base.T), (x[:, ::2, ::-1], base[:, ::2, ::-1]), (x[1:, 1:, ::3], base[1:, 1:, ::3]),
             (mx.full((2, 3, 4), mx.array([1.0, 2.0, 3.0, 4.0])), np.broadcast_to([1.0, 2.0, 3.0, 4.0], (2, 3, 4)))]
    for v, b in views:
        for k in (-1, 0, 2):
            check(mx.tril(v, k), np.tril(b, k))
            check(mx.triu(v, k=k), np.triu(b, k))


def test_tril_triu_edge_shapes():
    check(mx.triu(mx.zeros((0, 3))), np.zeros((0, 3)))
    check(mx.tril(mx.zeros((2, 0, 3))), np.zeros((2, 0, 3)))
    check(mx.tril(mx.array([[True, True], [True, True]])), [[True, False], [True, True]], mx.bool_)
    nan = mx.tril(mx.array([[float("nan"), 1.0], [1.0, 1.0]]), -1)
    check(nan, [[0, 0], [1, 0]])
    big = np.arange(300 * 400, dtype=np.float32).reshape(300, 400)
    check(mx.tril(mx.array(big.tolist()), 7), np.tril(big, 7))


def test_tril_triu_errors():
    for f, name in ((mx.tril, "tril"), (mx.triu, "triu")):
        with pytest.raises(ValueError) as e:
            f(mx.ones((3,)))
        assert str(e.value) == f"[{name}] array must be at least 2-D"
        with pytest.raises(TypeError):
            f([[1, 2], [3, 4]])
        with pytest.raises(TypeError):
            f(mx.ones((2, 2)), k=1.5)


# ------------------------------------------------------------------ errors

def test_creation_errors():
    errs = [
        (lambda: mx.zeros((2, -1)), ValueError, "[full] Negative dimensions not allowed."),
        (lambda: mx.ones(-1), ValueError, "[full] Negative dimensions not allowed."),
        (lambda: mx.full((2, 3), mx.array([1, 2])), ValueError,
         "[broadcast_shapes] Shapes (2) and (2,3) cannot be broadcast."),
        (lambda: mx.full((3,), mx.array([[1], [2]])), ValueError,
         "Cannot broadcast array of shape (2,1) into shape (3)."),
        (lambda: mx.full((2, 3), [1, 2, 3]), ValueError, "Invalid type list received in array initialization."),
        (lambda: mx.full((2,), "a"), ValueError, "Invalid type str received in array initialization."),
        (lambda: mx.full((2,), 2**40, mx.int32), ValueError, "Converting 1099511627776 to int32 would result in overflow."),
        (lambda: mx.full((2,), 300, mx.uint8), ValueError, "Converting 300 to uint8 would result in overflow."),
        (lambda: mx.full((2,), -1, mx.uint32), ValueError, "Converting -1 to uint32 would result in overflow."),
        (lambda: mx.full_like(mx.ones((2,), mx.uint8), -1), ValueError,
         "Converting -1 to uint8 would result in overflow."),
        (lambda: mx.full_like(mx.ones((2, 2), mx.float16), mx.array([1.0, 2.0, 3.0])), ValueError,
         "[broadcast_shapes] Shapes (2,2) and (3) cannot be broadcast."),
    ]
    for f, exc, msg in errs:
        with pytest.raises(exc) as e:
            f()
        assert str(e.value) == msg
    for f in (lambda: mx.zeros(3.0), lambda: mx.zeros_like([1, 2, 3]), lambda: mx.zeros_like(3.0),
              lambda: mx.full((2,), None), lambda: mx.ones((2,), "float32"), lambda: mx.full_like([1], 1)):
        with pytest.raises(TypeError):
            f()
