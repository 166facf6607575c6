"""mkpy.random against MLX 0.32: exact values (obtained from real MLX and baked in
below), determinism per key and per seed, the global key sequence, errors, and
distribution sanity. No MLX import: the expected values are literals."""
import math

import numpy as np
import pytest

import mkpy as mx

EXPECTED = {
    'key0': ('mx.random.key(0)', 'uint32', (2,),
        [0, 0]),
    'key42': ('mx.random.key(42)', 'uint32', (2,),
        [0, 42]),
    'key_big': ('mx.random.key(2**40 + 5)', 'uint32', (2,),
        [256, 5]),
    'key_max': ('mx.random.key(2**64 - 1)', 'uint32', (2,),
        [4294967295, 4294967295]),
    'split3': ('mx.random.split(mx.random.key(1), 3)', 'uint32', (3, 2),
        [[3568232559, 713140391], [3620866055, 2761185182], [2442350529, 2639019713]]),
    'split_default': ('mx.random.split(mx.random.key(1))', 'uint32', (2, 2),
        [[2441914641, 1384938218], [3819641963, 2025898573]]),
    'split5': ('mx.random.split(mx.random.key(7), num=5)', 'uint32', (5, 2),
        [[3583082021, 1059767885], [1158596951, 3570483602], [902484696, 1947592014],
         [964771841, 2936027381], [2956069637, 3584898772]]),
    'split1': ('mx.random.split(mx.random.key(0), 1)', 'uint32', (1, 2),
        [[928981903, 3453687069]]),
    'normal5': ('mx.random.normal((5,), key=mx.random.key(0))', 'float32', (5,),
        [0.1878441572189331, -1.2833421230316162, -0.2710915505886078, 1.2490599155426025, 0.24447001516819]),
    'normal33': ('mx.random.normal((33,), key=mx.random.key(123))', 'float32', (33,),
        [0.3347729742527008, 0.6734822392463684, 1.5111372470855713, 1.228702187538147, 1.6579558849334717,
         -0.6620790362358093, -0.3285338580608368, -2.5766568183898926, 0.6115973591804504,
         -0.026074420660734177, 0.19362185895442963, 2.112057685852051, 1.7849370241165161,
         1.7126624584197998, 0.23270557820796967, 0.4536355137825012, 1.4267762899398804,
         -0.46885544061660767, -0.016167255118489265, -1.0029900074005127, -0.35028597712516785,
         0.9100735187530518, 0.02428896725177765, 0.5583781599998474, -0.09652722626924515,
         -0.652434229850769, 0.4693998396396637, 0.17450954020023346, 1.1374914646148682,
         -0.5335500836372375, -0.673328697681427, 0.7510424256324768, 1.2578856945037842]),
    'normal_0d': ('mx.random.normal(key=mx.random.key(1))', 'float32', (),
        -1.1842842102050781),
    'normal_f16': ('mx.random.normal((3, 4), mx.float16, key=mx.random.key(2))', 'float16', (3, 4),
        [[0.5625, -0.41943359375, 0.8857421875, 1.5751953125],
         [1.51171875, -2.140625, -1.6240234375, 0.449951171875],
         [1.0732421875, 1.966796875, 1.833984375, 1.0830078125]]),
    'normal_bf16': ('mx.random.normal((3, 4), mx.bfloat16, key=mx.random.key(2))', 'bfloat16', (3, 4),
        [[0.5625, -0.419921875, 0.8828125, 1.578125], [1.515625, -2.140625, -1.625, 0.44921875],
         [1.0703125, 1.96875, 1.8359375, 1.0859375]]),
    'normal_f64': ('mx.random.normal((3, 4), mx.float64, key=mx.random.key(2))', 'float64', (3, 4),
        [[0.5627177051875617, -0.41942499515888965, 0.8862895557709743, 1.5759839565511253],
         [1.5118222917764448, -2.1404354566458794, -1.624641650219982, 0.4498261913393737],
         [1.0740042854868554, 1.966986676507663, 1.8345804974493547, 1.0834053929283014]]),
    'normal_c64': ('mx.random.normal((3,), mx.complex64, key=mx.random.key(0))', 'complex64', (3,),
        [[0.13282588124275208, -0.9074599146842957], [0.45920810103416443, 0.8832187652587891],
         [0.17286640405654907, -0.08304928243160248]]),
    'normal_c64_scale': ('mx.random.normal((2, 3), mx.complex64, scale=2, loc=mx.array([1.0, 2.0, 3.0]), key=mx.random.key(1))', 'complex64', (2, 3),
        [[[1.1067028045654297, -1.4187486171722412], [0.3833421468734741, -0.20303966104984283],
          [3.834984302520752, -2.034228563308716]],
         [[0.9505046606063843, 0.2051662653684616], [2.3345420360565186, 2.2101330757141113],
          [1.393678903579712, 1.2964797019958496]]]),
    'normal_loc_arr': ('mx.random.normal((3,), loc=mx.array([1.0, 2.0, 3.0]), key=mx.random.key(0))', 'float32', (3,),
        [2.816087245941162, 1.5173770189285278, 3.3398892879486084]),
    'normal_loc_scale': ('mx.random.normal((3,), loc=1, scale=2, key=mx.random.key(0))', 'float32', (3,),
        [4.632174491882324, 0.03475397825241089, 1.6797785758972168]),
    'normal_scale_arr': ('mx.random.normal((2, 3), scale=mx.array([1.0, 2.0, 3.0]), key=mx.random.key(1))', 'float32', (2, 3),
        [[0.9573070406913757, -1.9398576021194458, 3.0211992263793945],
         [0.3661906123161316, 0.34589722752571106, 0.872767448425293]]),
    'normal_bf16_ls': ('mx.random.normal((2, 3), mx.bfloat16, scale=2, loc=mx.array([1.0, 2.0, 3.0]), key=mx.random.key(1))', 'bfloat16', (2, 3),
        [[2.90625, 0.0546875, 5.0], [1.734375, 2.34375, 3.578125]]),
    'normal_f16_ls': ('mx.random.normal((2, 3), mx.float16, scale=0.3, loc=-1.5, key=mx.random.key(1))', 'float16', (2, 3),
        [[-1.212890625, -1.791015625, -1.1982421875], [-1.3896484375, -1.4482421875, -1.4130859375]]),
    'normal_f64_ls': ('mx.random.normal((2, 3), mx.float64, scale=0.3, loc=-1.5, key=mx.random.key(1))', 'float64', (2, 3),
        [[-1.2128078760583416, -1.7909786389587254, -1.1978800523716622],
         [-1.390142814792875, -1.4481154161149323, -1.4127232501930473]]),
    'normal_f64_loc01': ('mx.random.normal((2,), mx.float64, loc=0.1, key=mx.random.key(0))', 'float64', (2,),
        [-0.6847656370220537, 0.9564451194593192]),
    'uniform33': ('mx.random.uniform(shape=(3, 3), key=mx.random.key(42))', 'float32', (3, 3),
        [[0.6439377665519714, 0.3225158154964447, 0.19349373877048492],
         [0.8864933848381042, 0.7247436046600342, 0.19193007051944733],
         [0.34513092041015625, 0.25238314270973206, 0.6319014430046082]]),
    'uniform7': ('mx.random.uniform(shape=(7,), key=mx.random.key(3))', 'float32', (7,),
        [0.3173735737800598, 0.8551788926124573, 0.8164340853691101, 0.9489181041717529,
         0.08783916383981705, 0.04712248593568802, 0.857948899269104]),
    'uniform1': ('mx.random.uniform(shape=(1,), key=mx.random.key(3))', 'float32', (1,),
        [0.8653929233551025]),
    'uniform0d': ('mx.random.uniform(key=mx.random.key(3))', 'float32', (),
        0.8653929233551025),
    'uniform_f16': ('mx.random.uniform(shape=(2, 3), dtype=mx.float16, key=mx.random.key(5))', 'float16', (2, 3),
        [[0.6845703125, 0.69970703125, 0.70751953125], [0.71630859375, 0.0650634765625, 0.5859375]]),
    'uniform_bf16': ('mx.random.uniform(shape=(2, 3), dtype=mx.bfloat16, key=mx.random.key(5))', 'bfloat16', (2, 3),
        [[0.68359375, 0.69921875, 0.70703125], [0.71484375, 0.06494140625, 0.5859375]]),
    'uniform_bounds': ('mx.random.uniform(-2.5, 3.25, (9,), key=mx.random.key(11))', 'float32', (9,),
        [-1.6726975440979004, 0.7415916919708252, 2.520493984222412, 1.169360637664795, 0.6727328300476074,
         -0.09051942825317383, 1.3318068981170654, -1.6238348484039307, 2.9555563926696777]),
    'uniform_bounds_f16': ('mx.random.uniform(-2.5, 3.25, (9,), mx.float16, key=mx.random.key(11))', 'float16', (9,),
        [-1.671875, 0.7421875, 2.51953125, 1.169921875, 0.671875, -0.091796875, 1.33203125, -1.6240234375,
         2.95703125]),
    'uniform_bcast': ('mx.random.uniform(mx.array([0.0, 10.0, 100.0]), mx.array([[1.0], [2.0]]), (2, 3), key=mx.random.key(2))', 'float32', (2, 3),
        [[0.4383770525455475, 1.5218944549560547, 29.840553283691406],
         [1.136972427368164, 7.819511890411377, 6.518577575683594]]),
    'uniform_reversed': ('mx.random.uniform(1, 0, (4,), key=mx.random.key(0))', 'float32', (4,),
        [0.034678518772125244, 0.7748409509658813, 0.3669700026512146, 0.7036181688308716]),
    'randint20': ('mx.random.randint(-5, 10, shape=(20,), key=mx.random.key(3))', 'int32', (20,),
        [1, 5, 9, -3, 8, 1, 1, -2, 6, 8, 7, 0, 6, 4, -2, 5, 8, 9, -5, -4]),
    'randint_big': ('mx.random.randint(2**30, 2**30 + 100, shape=(8,), key=mx.random.key(3))', 'int32', (8,),
        [1073741824, 1073741923, 1073741923, 1073741824, 1073741824, 1073741824, 1073741923, 1073741824]),
    'randint_i64': ('mx.random.randint(0, 10, shape=(4,), dtype=mx.int64, key=mx.random.key(3))', 'int64', (4,),
        [2, 0, 6, 3]),
    'randint_u8': ('mx.random.randint(0, 10, shape=(4,), dtype=mx.uint8, key=mx.random.key(3))', 'uint8', (4,),
        [2, 0, 6, 3]),
    'randint_bool': ('mx.random.randint(0, 2, shape=(4,), dtype=mx.bool_, key=mx.random.key(3))', 'bool', (4,),
        [False, False, True, False]),
    'randint_empty': ('mx.random.randint(5, 3, shape=(4,), key=mx.random.key(3))', 'int32', (4,),
        [5, 5, 5, 5]),
    'randint_float_bounds': ('mx.random.randint(0.5, 3.7, shape=(6,), key=mx.random.key(3))', 'int32', (6,),
        [1, 1, 1, 2, 2, 2]),
    'randint_u8_wrap': ('mx.random.randint(0, 300, shape=(12,), dtype=mx.uint8, key=mx.random.key(5))', 'uint8', (12,),
        [19, 43, 43, 43, 43, 43, 23, 23, 43, 43, 29, 13]),
    'randint_i16_wrap': ('mx.random.randint(0, 70000, shape=(12,), dtype=mx.int16, key=mx.random.key(5))', 'int16', (12,),
        [4439, 4311, 0, 0, 0, 4463, 4463, 0, 0, 4463, 4463, 0]),
    'randint_neg_float': ('mx.random.randint(-2.5, 2.5, shape=(12,), dtype=mx.int32, key=mx.random.key(5))', 'int32', (12,),
        [-2, 1, 0, 1, 0, -1, -2, 1, 0, -1, -2, 1]),
    'randint_bcast': ('mx.random.randint(mx.array([0, 10]), mx.array([[5], [100]]), shape=(2, 2), key=mx.random.key(5))', 'int32', (2, 2),
        [[4, 10], [41, 89]]),
    'randint_0d': ('mx.random.randint(0, 10, key=mx.random.key(0))', 'int32', (),
        4),
    'bernoulli_0d': ('mx.random.bernoulli(key=mx.random.key(0))', 'bool', (),
        True),
    'bernoulli5': ('mx.random.bernoulli(0.3, (5,), key=mx.random.key(0))', 'bool', (5,),
        [False, True, False, False, False]),
    'bernoulli_arr': ('mx.random.bernoulli(mx.array([0.1, 0.9]), (3, 2), key=mx.random.key(0))', 'bool', (3, 2),
        [[False, True], [False, True], [False, True]]),
    'bernoulli_f16': ('mx.random.bernoulli(mx.array([0.25, 0.75], mx.float16), (4, 2), key=mx.random.key(8))', 'bool', (4, 2),
        [[False, False], [False, True], [False, True], [False, True]]),
    'bernoulli_f64': ('mx.random.bernoulli(mx.array([0.25, 0.75], mx.float64), (4, 2), key=mx.random.key(8))', 'bool', (4, 2),
        [[False, False], [False, True], [False, True], [False, True]]),
    'gumbel5': ('mx.random.gumbel((5,), key=mx.random.key(0))', 'float32', (5,),
        [0.5901318192481995, -0.835396945476532, 0.06877371668815613, 2.19059681892395, 0.6605551242828369]),
    'gumbel_f16': ('mx.random.gumbel((2, 3), mx.float16, key=mx.random.key(0))', 'float16', (2, 3),
        [[0.59130859375, -0.8359375, 1.2099609375], [2.189453125, 0.66064453125, 0.2344970703125]]),
    'laplace7': ('mx.random.laplace((7,), key=mx.random.key(0))', 'float32', (7,),
        [-0.06662396341562271, 0.35765570402145386, 0.3464798927307129, -0.5847270488739014,
         1.599391222000122, -3.3792343139648438, 0.939622163772583]),
    'laplace_ls': ('mx.random.laplace((7,), loc=1.5, scale=0.5, key=mx.random.key(0))', 'float32', (7,),
        [1.4666880369186401, 1.6788278818130493, 1.6732399463653564, 1.2076364755630493, 2.2996954917907715,
         -0.18961715698242188, 1.9698110818862915]),
    'laplace_f64': ('mx.random.laplace((2, 3), mx.float64, 0.3, 2.0, key=mx.random.key(0))', 'float64', (2, 3),
        [[-0.022689064751968246, 3.525163390169179, -1.0230333064021495],
         [-2.805707253933738, -0.1291932872306738, 0.49631987016106016]]),
}

# truncated_normal, categorical (both of MLX's paths: argmax(gumbel + logits), and
# the inverse CDF it uses for one distribution sampled with a shape) and permutation
EXPECTED.update({
    'trunc_scalar': ('mx.random.truncated_normal(-2.5, 1.5, (12,), key=mx.random.key(3))', 'float32', (12,),
        [0.8602883815765381, 0.15628033876419067, 1.438942790031433, -0.20774075388908386,
         0.40933865308761597, 1.0797456502914429, 0.6129524111747742, -0.7070536017417908,
         -0.3900478482246399, -0.05572644621133804, -1.2696588039398193, -0.08310186862945557]),
    'trunc_f16': ('mx.random.truncated_normal(-2.5, 1.5, (8,), mx.float16, key=mx.random.key(3))', 'float16', (8,),
        [-0.5234375, 0.8359375, 0.7158203125, -0.1072998046875, -1.3564453125, -1.646484375, 0.84521484375,
         -0.373779296875]),
    'trunc_bf16': ('mx.random.truncated_normal(-2.5, 1.5, (8,), mx.bfloat16, key=mx.random.key(3))', 'bfloat16', (8,),
        [-0.5234375, 0.8515625, 0.71875, -0.10791015625, -1.3515625, -1.65625, 0.8671875, -0.375]),
    'trunc_bcast': ('mx.random.truncated_normal(mx.array([-1.0, 0.0]), mx.array([[1.0], [2.0], [3.0]]), key=mx.random.key(0))', 'float32', (3, 2),
        [[0.12783627212047577, 0.08539751917123795], [0.7258174419403076, 1.4519811868667603],
         [0.411830335855484, 0.6008020639419556]]),
    'trunc_arrays': ('mx.random.truncated_normal(mx.array([-3.0, -1.0, 0.0]), mx.array([3.0, 2.0, 0.1]), (4, 3), key=mx.random.key(5))', 'float32', (4, 3),
        [[-1.517261266708374, 1.968108057975769, 0.05176355317234993],
         [1.0026386976242065, 0.19267460703849792, 0.038479436188936234],
         [-1.3981951475143433, 1.4209550619125366, 0.056948114186525345],
         [-0.4316209852695465, -0.7094230651855469, 0.08974862843751907]]),
    'trunc_0d': ('mx.random.truncated_normal(-1, 1, key=mx.random.key(0))', 'float32', (),
        -0.13999611139297485),
    'cat_1d': ('mx.random.categorical(mx.array([0.1, 2.0, -1.0, 0.5]), key=mx.random.key(0))', 'uint32', (),
        0),
    'cat_2d': ('mx.random.categorical(mx.array([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0]]), key=mx.random.key(1))', 'uint32', (2,),
        [1, 0]),
    'cat_axis0': ('mx.random.categorical(mx.array([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0]]), axis=0, key=mx.random.key(1))', 'uint32', (4,),
        [1, 0, 1, 0]),
    'cat_num_samples': ('mx.random.categorical(mx.array([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0]]), num_samples=7, key=mx.random.key(1))', 'uint32', (2, 7),
        [[1, 1, 1, 3, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0]]),
    'cat_shape': ('mx.random.categorical(mx.array([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0]]), shape=(3, 2), key=mx.random.key(1))', 'uint32', (3, 2),
        [[2, 2], [3, 0], [1, 0]]),
    'cat_f16': ('mx.random.categorical(mx.array([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0]], mx.float16), shape=(5, 2), key=mx.random.key(1))', 'uint32', (5, 2),
        [[1, 0], [1, 0], [1, 0], [1, 0], [3, 0]]),
    'cat_single_samples': ('mx.random.categorical(mx.array([0.0, 0.0, 1.0, 0.0]), num_samples=20, key=mx.random.key(2))', 'uint32', (20,),
        [3, 3, 0, 2, 2, 1, 2, 1, 0, 2, 1, 1, 0, 1, 1, 2, 3, 3, 2, 2]),
    'cat_single_row': ('mx.random.categorical(mx.array([[0.0, 0.0, 1.0, 0.0]]), key=mx.random.key(2))', 'uint32', (1,),
        [2]),
    'cat_single_shape': ("mx.random.categorical(mx.array([0.0, -float('inf'), 1.0, 0.3]), shape=(2, 3), key=mx.random.key(2))", 'uint32', (2, 3),
        [[2, 3, 2], [2, 2, 3]]),
    'cat_single_col': ('mx.random.categorical(mx.array([[0.0], [0.0], [1.0], [0.0]]), axis=0, num_samples=9, key=mx.random.key(2))', 'uint32', (1, 9),
        [[0, 2, 2, 0, 3, 1, 2, 2, 3]]),
    'perm_n': ('mx.random.permutation(10, key=mx.random.key(0))', 'uint32', (10,),
        [3, 6, 7, 4, 0, 2, 5, 1, 9, 8]),
    'perm_37': ('mx.random.permutation(37, key=mx.random.key(9))', 'uint32', (37,),
        [14, 7, 5, 22, 24, 36, 17, 35, 28, 4, 13, 8, 2, 0, 11, 29, 23, 32, 26, 31, 33, 10, 34, 20, 1, 3, 30,
         15, 6, 18, 21, 19, 12, 9, 27, 16, 25]),
    'perm_rows': ('mx.random.permutation(mx.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]), key=mx.random.key(3))', 'int32', (4, 3),
        [[4, 5, 6], [1, 2, 3], [10, 11, 12], [7, 8, 9]]),
    'perm_cols': ('mx.random.permutation(mx.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]), axis=1, key=mx.random.key(3))', 'int32', (4, 3),
        [[2, 1, 3], [5, 4, 6], [8, 7, 9], [11, 10, 12]]),
    'perm_view': ('mx.random.permutation(mx.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]).T, axis=-1, key=mx.random.key(3))', 'int32', (3, 4),
        [[4, 1, 10, 7], [5, 2, 11, 8], [6, 3, 12, 9]]),
    'perm_bf16': ('mx.random.permutation(mx.array([[[1.5, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]], mx.bfloat16), axis=1, key=mx.random.key(3))', 'bfloat16', (3, 2, 2),
        [[[1.5, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]], [[9.0, 10.0], [11.0, 12.0]]]),
})

# after seed(7): normal((4,)) twice, uniform(shape=(3,)), randint(0, 100, (5,)),
# bernoulli(0.5, (6,)), then the global key
SEED7_SEQUENCE = [[-1.420398473739624, -0.43944332003593445, 0.9646756052970886, -0.46311402320861816],
     [0.21397587656974792, -0.015061958692967892, 0.5431252121925354, -0.9309356212615967],
     [0.4448082447052002, 0.9945530295372009, 0.24529558420181274], [25, 20, 94, 55, 54],
     [False, False, True, True, False, True], [2573644155, 4022600699]]
SEED0_UNIFORM = [0.10536903887987137, 0.2787191867828369]


def _plain(v):
    """tolist() output with complex numbers as [re, im], as the baked values."""
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, complex):
        return [v.real, v.imag]
    return v


def _dtype_name(a):
    return str(a.dtype).split(".")[-1]


# ---------------------------------------------------------------- exact values

# Distributions that call the platform's float32 log (laplace and gumbel, in MLX and in mkpy):
# their last bit is the C library's (glibc 2.41's logf rounds some values the other way from
# Debian 12's), so float32 results compare within one ulp; everything else is bit for bit.
LIBM_LOG = ("laplace", "gumbel")


def _within_one_ulp(got, want):
    g, w = np.asarray(got, np.float32).ravel(), np.asarray(want, np.float32).ravel()
    gi, wi = g.view(np.int32).astype(np.int64), w.view(np.int32).astype(np.int64)
    return g.shape == w.shape and bool(np.all((np.abs(gi - wi) <= 1) & (np.sign(g) == np.sign(w))))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_as_mlx(name):
    expr, dtype, shape, values = EXPECTED[name]
    a = eval(expr, {"mx": mx})
    assert _dtype_name(a) == dtype
    assert tuple(a.shape) == shape
    if name.startswith(LIBM_LOG) and dtype == "float32":
        assert _within_one_ulp(_plain(a.tolist()), values)
    else:
        assert _plain(a.tolist()) == values


def test_seed_sequence_as_mlx():
    mx.random.seed(7)
    got = [mx.random.normal((4,)).tolist(), mx.random.normal((4,)).tolist(),
           mx.random.uniform(shape=(3,)).tolist(), mx.random.randint(0, 100, (5,)).tolist(),
           mx.random.bernoulli(0.5, (6,)).tolist(), mx.random.state[0].tolist()]
    assert got == SEED7_SEQUENCE
    mx.random.seed(0)
    assert [mx.random.uniform().item(), mx.random.uniform().item()] == SEED0_UNIFORM


def test_global_sequence_is_split_of_key():
    # next() splits the global key: row 0 becomes the new key, row 1 is used
    mx.random.seed(123)
    k = mx.random.key(123)
    first, second = mx.random.split(k).tolist()
    assert mx.random.uniform(shape=(5,)).tolist() == mx.random.uniform(
        shape=(5,), key=mx.array(second, mx.uint32)).tolist()
    assert mx.random.state[0].tolist() == first
    assert len(mx.random.state) == 1


def test_state_can_be_restored():
    mx.random.seed(5)
    saved = mx.random.state[0]
    a = mx.random.normal((3,)).tolist()
    mx.random.state[0] = saved
    assert mx.random.normal((3,)).tolist() == a
    with pytest.raises(IndexError):
        mx.random.state[1]


# ------------------------------------------------------------------ determinism

def test_same_key_same_values():
    k = mx.random.key(2024)
    for f in (lambda: mx.random.uniform(shape=(50,), key=k), lambda: mx.random.normal((7, 3), key=k),
              lambda: mx.random.randint(-9, 9, (20,), key=k), lambda: mx.random.bernoulli(0.4, (30,), key=k),
              lambda: mx.random.bits((13,), key=k), lambda: mx.random.gumbel((4,), key=k)):
        assert f().tolist() == f().tolist()


def test_different_keys_differ():
    a = mx.random.uniform(shape=(16,), key=mx.random.key(1)).tolist()
    b = mx.random.uniform(shape=(16,), key=mx.random.key(2)).tolist()
    assert a != b


def test_calls_without_key_advance():
    mx.random.seed(3)
    a = mx.random.uniform(shape=(4,)).tolist()
    b = mx.random.uniform(shape=(4,)).tolist()
    assert a != b
    mx.random.seed(3)
    assert mx.random.uniform(shape=(4,)).tolist() == a


def test_failed_call_still_consumes_a_key():
    # as MLX: the key is drawn before the arguments are checked
    mx.random.seed(11)
    k0 = mx.random.state[0].tolist()
    with pytest.raises(ValueError):
        mx.random.uniform(mx.array([1.0, 2.0]), 3, (3,))
    assert mx.random.state[0].tolist() != k0


def test_key_views_and_lazy_keys():
    # keys may be strided views or unevaluated results
    ks = mx.random.split(mx.random.key(9), 4)
    row = mx.random.split(mx.random.key(9), 4)[2]
    col = ks.T[:, 2]  # a strided (2,) view
    ref = mx.random.uniform(shape=(6,), key=mx.array(ks.tolist()[2], mx.uint32)).tolist()
    assert mx.random.uniform(shape=(6,), key=row).tolist() == ref
    assert mx.random.uniform(shape=(6,), key=col).tolist() == ref


# ------------------------------------------------------------------------ bits

def test_bits_stream_layout():
    k = mx.random.key(77)
    words = mx.random.bits((6,), key=k).tolist()
    # split(key, n) is bits((n, 2)): the same stream of words
    assert sum(mx.random.split(k, 3).tolist(), []) == words
    # narrower widths are the bytes of the same stream, cut at the end
    raw = np.array(words, np.uint32).tobytes()
    assert mx.random.bits((24,), width=1, key=k).tolist() == list(raw)
    assert mx.random.bits((12,), width=2, key=k).tolist() == np.frombuffer(raw, np.uint16).tolist()
    # an odd number of words: the middle word comes from counter (half, 0)
    five = np.array(mx.random.bits((5,), key=k).tolist(), np.uint32).tobytes()
    assert mx.random.bits((19,), width=1, key=k).tolist() == list(five[:19])
    assert mx.random.bits((9,), width=2, key=k).tolist() == np.frombuffer(five[:18], np.uint16).tolist()


def test_bits_dtypes_and_shapes():
    k = mx.random.key(0)
    for width, dt in ((4, mx.uint32), (2, mx.uint16), (1, mx.uint8)):
        a = mx.random.bits((3, 0), width, key=k)
        assert a.dtype == dt and a.shape == (3, 0)
        b = mx.random.bits((2, 3), width, key=k)
        assert b.dtype == dt and b.shape == (2, 3)
    assert mx.random.bits(key=k).shape == ()
    with pytest.raises(ValueError, match=r"\[bits\] Bit width must be in \{1, 2, 4\} but got 3."):
        mx.random.bits((2,), 3, key=k)


# ---------------------------------------------------------- shapes and dtypes

@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_uniform_dtypes(dtype):
    a = mx.random.uniform(-1, 2, (4, 5), dtype, key=mx.random.key(1))
    assert a.dtype == dtype and a.shape == (4, 5)
    v = np.array(a.astype(mx.float32).tolist())
    assert v.min() >= -1 and v.max() < 2


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.float64, mx.complex64])
def test_normal_dtypes(dtype):
    a = mx.random.normal((3, 2), dtype, key=mx.random.key(1))
    assert a.dtype == dtype and a.shape == (3, 2)


@pytest.mark.parametrize("dtype", [mx.int32, mx.int64, mx.uint8, mx.int8, mx.uint32, mx.int16])
def test_randint_dtypes(dtype):
    a = mx.random.randint(0, 100, (50,), dtype, key=mx.random.key(4))
    assert a.dtype == dtype and a.shape == (50,)
    v = np.array(a.tolist())
    assert v.min() >= 0 and v.max() < 100


def test_empty_and_scalar_shapes():
    k = mx.random.key(0)
    assert mx.random.uniform(shape=(0, 4), key=k).shape == (0, 4)
    assert mx.random.normal((0,), key=k).tolist() == []
    assert mx.random.uniform(key=k).shape == ()
    assert mx.random.normal(key=k).shape == ()
    assert mx.random.bernoulli(key=k).dtype == mx.bool_
    assert mx.random.split(k, 0).shape == (0, 2)


def test_uniform_bounds_broadcast():
    a = mx.random.uniform(mx.array([0.0, 10.0, 100.0]), 101.0, (4, 3), key=mx.random.key(2))
    v = np.array(a.tolist())
    assert (v[:, 0] >= 0).all() and (v[:, 1] >= 10).all() and (v[:, 2] >= 100).all() and (v < 101).all()


def test_normal_loc_scale_relation():
    k = mx.random.key(6)
    z = np.array(mx.random.normal((100,), key=k).tolist())
    y = np.array(mx.random.normal((100,), loc=3.0, scale=2.0, key=k).tolist())
    np.testing.assert_allclose(y, 3.0 + 2.0 * z, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------- distribution sanity

def test_normal_moments():
    v = np.array(mx.random.normal((100000,), key=mx.random.key(0)).tolist())
    assert abs(v.mean()) < 0.02 and abs(v.std() - 1) < 0.02
    assert (np.abs(v) < 6).all()


def test_complex_normal_moments():
    v = np.array(mx.random.normal((50000,), mx.complex64, key=mx.random.key(1)).tolist())
    assert abs(v.real.std() - math.sqrt(0.5)) < 0.02 and abs(v.imag.std() - math.sqrt(0.5)) < 0.02


def test_uniform_range_and_mean():
    v = np.array(mx.random.uniform(shape=(100000,), key=mx.random.key(3)).tolist())
    assert v.min() >= 0 and v.max() < 1
    assert abs(v.mean() - 0.5) < 0.01 and abs(v.var() - 1 / 12) < 0.005


def test_randint_uniform_counts():
    v = np.array(mx.random.randint(-3, 7, (100000,), key=mx.random.key(5)).tolist())
    assert v.min() == -3 and v.max() == 6
    counts = np.bincount(v + 3)
    assert (np.abs(counts - 10000) < 600).all()


def test_bernoulli_rate():
    v = np.array(mx.random.bernoulli(0.3, (100000,), key=mx.random.key(6)).tolist())
    assert abs(v.mean() - 0.3) < 0.01
    assert mx.random.bernoulli(0.0, (100,), key=mx.random.key(1)).tolist() == [False] * 100
    assert mx.random.bernoulli(1.0, (100,), key=mx.random.key(1)).tolist() == [True] * 100


def test_large_draws_follow_the_stream():
    # big draws are split over the thread pool; uniform must still be
    # bits / 2^32 (clamped below one) element by element, including around
    # the middle of the stream where the two halves of each hash meet
    k = mx.random.key(31)
    n = 300001
    words = mx.random.bits((n,), key=k).tolist()
    assert len(set(words[:1000])) > 990
    u = mx.random.uniform(shape=(n,), key=k).tolist()
    half = n // 2
    for i in (0, 1, 4095, 4096, half - 1, half, half + 1, n - 2, n - 1):
        assert u[i] == min(np.float32(words[i]) / np.float32(2**32), np.float32(1 - 2**-24))


# ---------------------------------------------------------------------- errors

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_errors():
    k = mx.random.key(0)
    cases = [
        (lambda: mx.random.uniform(shape=(3,), dtype=mx.int32, key=k), ValueError,
         "[uniform] Can only generate uniform numbers with real floating point type."),
        (lambda: mx.random.uniform(mx.zeros((2, 3)), 1, (3,), key=k), ValueError,
         "[uniform] Cannot generate random values of shape (3) from broadcasted shape (2,3)."),
        (lambda: mx.random.uniform(mx.zeros((2, 3)), 1, key=k), ValueError,
         "[uniform] Cannot generate random values of shape () from broadcasted shape (2,3)."),
        (lambda: mx.random.uniform(mx.array([0, 1]), 5, (3,), key=k), ValueError,
         "[broadcast_shapes] Shapes (3) and (2) cannot be broadcast."),
        (lambda: mx.random.uniform(shape=(2,), dtype=mx.float64, key=k), RuntimeError,
         "[uniform] Unsupported type."),
        (lambda: mx.random.uniform(shape=(2, -1), key=k), ValueError, "[bits] Negative dimensions not allowed."),
        (lambda: mx.random.normal((3,), mx.int32, key=k), ValueError,
         "[normal] Only floating point and complex64 types are supported."),
        (lambda: mx.random.normal((2,), loc=mx.array([1.0, 2.0, 3.0]), key=k), ValueError,
         "[broadcast_shapes] Shapes (3) and (2) cannot be broadcast."),
        (lambda: mx.random.randint(0, 5, (3,), mx.float32, key=k), ValueError,
         "[randint] randint only accepts integer dtypes and bool."),
        (lambda: mx.random.bernoulli(1, key=k), ValueError,
         "[bernoulli] bernoulli probability `p` must be a float type."),
        (lambda: mx.random.bernoulli(mx.zeros((3, 2)), (2,), key=k), ValueError,
         "[bernoulli] shape of `p` is incompatible with argument `shape`."),
        (lambda: mx.random.uniform(key=mx.array([1, 2])), ValueError,
         "[bits] Expected key type uint32 but received int32."),
        (lambda: mx.random.uniform(key=mx.array([1, 2, 3], mx.uint32)), ValueError,
         "[bits] Expected key shape (2) but received (3)."),
        (lambda: mx.random.split(mx.random.key(0), -1), ValueError, "[bits] Negative dimensions not allowed."),
        (lambda: mx.random.laplace((2,), mx.int32, key=k), ValueError,
         "[laplace] Only real floating point types are supported."),
        (lambda: mx.random.uniform([0, 1], 2, (2,), key=k), ValueError,
         "Invalid type list received in array initialization."),
    ]
    for f, exc, msg in cases:
        with pytest.raises(exc) as e:
            f()
        assert str(e.value) == msg
    for f in (lambda: mx.random.key(-1), lambda: mx.random.key(2**64), lambda: mx.random.seed(-1),
              lambda: mx.random.uniform(0, 1, 3, key=k), lambda: mx.random.uniform(key=[1, 2]),
              lambda: mx.random.split(k, 3.0), lambda: mx.random.normal((2,), key=k, bogus=1)):
        with pytest.raises(TypeError):
            f()


# ------------------------------------------- truncated normal, categorical, permutation

def test_truncated_normal_bounds_and_dtypes():
    v = np.array(mx.random.truncated_normal(-0.5, 1.0, (20000,), key=mx.random.key(1)).tolist())
    assert v.min() >= -0.5 and v.max() <= 1.0
    for dt in (mx.float16, mx.bfloat16, mx.float32):
        a = mx.random.truncated_normal(-1, 1, (3, 2), dt, key=mx.random.key(2))
        assert a.dtype == dt and a.shape == (3, 2)


def test_categorical_frequencies():
    logits = mx.array([[0.0, 1.0, 2.0, -float("inf")]])
    p = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    for samples in (mx.random.categorical(logits, num_samples=30000, key=mx.random.key(3)),  # inverse CDF
                    mx.random.categorical(mx.full((30000, 4), logits), key=mx.random.key(4))):  # gumbel
        v = np.array(samples.tolist()).ravel()
        assert samples.dtype == mx.uint32 and v.max() <= 2
        np.testing.assert_allclose(np.bincount(v, minlength=3)[:3] / v.size, p, atol=0.015)


def test_permutation_is_a_permutation():
    for n in (0, 1, 5, 1000, 70001):
        p = mx.random.permutation(n, key=mx.random.key(n))
        assert p.dtype == mx.uint32 and sorted(p.tolist()) == list(range(n))
    x = mx.array([[1, 2], [3, 4], [5, 6]], mx.int8)
    y = mx.random.permutation(x, key=mx.random.key(0))
    assert y.dtype == mx.int8 and sorted(y.tolist()) == x.tolist()


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_extra_errors():
    k = mx.random.key(0)
    cases = [
        (lambda: mx.random.truncated_normal(-1, 1, (3,), mx.int32, key=k), ValueError,
         "[trunc_normal] trunc_normal only accepts floating point dtypes."),
        (lambda: mx.random.truncated_normal(-1, 1, (3,), mx.float64, key=k), RuntimeError,
         "[uniform] Unsupported type."),
        (lambda: mx.random.categorical(mx.zeros((2, 3)), axis=2, key=k), IndexError,
         "[categorical] Invalid axis 2 for logits with 2 dimensions."),
        (lambda: mx.random.categorical(mx.zeros((2, 3)), shape=(4,), key=k), ValueError,
         "[broadcast_shapes] Shapes (4) and (2) cannot be broadcast."),
        (lambda: mx.random.categorical(mx.zeros((2, 3)), shape=(4, 2), num_samples=3, key=k), ValueError,
         "[categorical] At most one of shape or num_samples can be specified."),
        (lambda: mx.random.categorical(mx.zeros((0, 3)), key=k), ValueError,
         "[argmax] Cannot argmax reduce zero size array."),
        (lambda: mx.random.categorical(mx.zeros((2, 3)), num_samples=-1, key=k), ValueError,
         "[bits] Negative dimensions not allowed."),
        (lambda: mx.random.permutation(-1, key=k), ValueError, "[bits] Negative dimensions not allowed."),
        (lambda: mx.random.permutation(mx.zeros((2, 3)), axis=2, key=k), IndexError, "SmallVector out of range."),
    ]
    for f, exc, msg in cases:
        with pytest.raises(exc) as e:
            f()
        assert str(e.value) == msg
    for f in (lambda: mx.random.categorical([1.0, 2.0], key=k), lambda: mx.random.permutation([1, 2], key=k),
              lambda: mx.random.permutation(3.0, key=k)):
        with pytest.raises(TypeError):
            f()


# ------------------------------------------------------------------ multivariate_normal

def test_multivariate_normal_is_mean_plus_normal_times_svd_root():
    # the definition MLX composes: mean + z @ (U * sqrt(S)) @ Vt, z = normal(shape + (n,)) of the same key
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3))
    cov = (A @ A.T + np.eye(3)).astype(np.float32)
    mean = np.array([1.0, -2.0, 0.5], np.float32)
    key = mx.random.key(7)
    got = np.array(mx.random.multivariate_normal(mx.array(mean), mx.array(cov), shape=(5,), key=key,
                                                 stream=mx.cpu))
    z = np.array(mx.random.normal((5, 3), key=key))
    U, S, Vt = np.linalg.svd(cov.astype(np.float64))
    want = mean + z @ ((U * np.sqrt(S)) @ Vt)
    assert got.shape == (5, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_multivariate_normal_statistics_and_shapes():
    cov = np.array([[2.0, 0.6], [0.6, 1.0]], np.float32)
    s = np.array(mx.random.multivariate_normal(mx.array([1.0, -1.0]), mx.array(cov), shape=(40000,),
                                               key=mx.random.key(1), stream=mx.cpu))
    assert np.abs(s.mean(0) - [1.0, -1.0]).max() < 0.05
    assert np.abs(np.cov(s.T) - cov).max() < 0.06
    # batch shapes broadcast: cov (4, 2, 2), mean (3, 1, 2) -> (3, 4, 2); integer inputs give float32
    out = mx.random.multivariate_normal(mx.zeros((3, 1, 2), mx.int32), mx.broadcast_to(mx.eye(2), (4, 2, 2)),
                                        stream=mx.cpu)
    assert out.shape == (3, 4, 2) and out.dtype == mx.float32


def test_multivariate_normal_errors_are_mlxs():
    m, c = mx.zeros((2,)), mx.eye(2)
    for t in (mx.float16, mx.bfloat16, mx.int32):
        with pytest.raises(ValueError, match=r"\[multivariate_normal\] dtype must be float32."):
            mx.random.multivariate_normal(m, c, dtype=t, stream=mx.cpu)
    with pytest.raises(ValueError, match="mean must have at least one dimension"):
        mx.random.multivariate_normal(mx.array(0.0), c, stream=mx.cpu)
    with pytest.raises(ValueError, match="cov must have at least two dimensions"):
        mx.random.multivariate_normal(m, mx.zeros((2,)), stream=mx.cpu)
    with pytest.raises(ValueError, match="last two dimensions of cov must be equal"):
        mx.random.multivariate_normal(m, mx.zeros((2, 3)), stream=mx.cpu)
    with pytest.raises(ValueError, match="mean and cov must have compatible shapes"):
        mx.random.multivariate_normal(mx.zeros((3,)), c, stream=mx.cpu)
    # the SVD is CPU-only in MLX: the default (gpu) stream raises through it
    with pytest.raises(ValueError, match="not yet supported on the GPU"):
        mx.random.multivariate_normal(m, c)
