"""Dtypes: names, sizes, reprs, equality, pickling, issubdtype, and MLX's
promotion rules (the 14x14 table and weakly typed Python scalars).

Expected values were produced with MLX 0.32.4 and are baked in here."""
import copy
import operator
import pickle

import pytest

import mkpy as mx

# (attribute, name, size), in MLX's Dtype::Val order
DTYPES = [
    ("bool_", "bool", 1), ("uint8", "uint8", 1), ("uint16", "uint16", 2), ("uint32", "uint32", 4),
    ("uint64", "uint64", 8), ("int8", "int8", 1), ("int16", "int16", 2), ("int32", "int32", 4),
    ("int64", "int64", 8), ("float16", "float16", 2), ("float32", "float32", 4),
    ("float64", "float64", 8), ("bfloat16", "bfloat16", 2), ("complex64", "complex64", 8),
]
ALL = [getattr(mx, attr) for attr, _, _ in DTYPES]
ABBR = ["b_", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4", "f8", "bf", "c8"]
BY_ABBR = dict(zip(ABBR, ALL))
CATS = [mx.complexfloating, mx.floating, mx.inexact, mx.signedinteger, mx.unsignedinteger,
        mx.integer, mx.number, mx.generic]
CAT_NAMES = ["complexfloating", "floating", "inexact", "signedinteger", "unsignedinteger",
             "integer", "number", "generic"]


# ------------------------------------------------------------------ objects

@pytest.mark.parametrize("attr,name,size", DTYPES)
def test_name_size_repr(attr, name, size):
    t = getattr(mx, attr)
    assert isinstance(t, mx.Dtype)
    assert t.size == size
    # MLX prints mlx.core.<name>; mkpy prints mkpy.<name>
    assert repr(t) == "mkpy." + name
    assert str(t) == "mkpy." + name
    assert mx.array(0, t).dtype == t
    assert mx.array(0, t).itemsize == size


def test_bool_is_exported_as_bool_only():
    assert mx.bool_ == mx.array(True).dtype
    assert not hasattr(mx, "bool")  # as MLX: the builtin stays usable after import *


def test_equality_and_hash():
    for i, a in enumerate(ALL):
        for j, b in enumerate(ALL):
            assert (a == b) == (i == j)
            assert (a != b) == (i != j)
    assert len({t: 1 for t in ALL}) == 14
    assert {mx.float32: "x"}[mx.array(1.0).dtype] == "x"
    assert hash(mx.float32) == hash(mx.array(1.0).dtype)
    # not equal to anything else, and not ordered
    assert mx.float32 != "float32"
    assert not (mx.float32 == 4)
    with pytest.raises(TypeError):
        mx.float32 < mx.int32


def test_dtype_has_no_constructor():
    with pytest.raises(TypeError):
        mx.Dtype()


@pytest.mark.parametrize("t", ALL, ids=ABBR)
def test_pickle_and_copy(t):
    assert pickle.loads(pickle.dumps(t)) is t
    assert copy.copy(t) is t
    assert copy.deepcopy(t) is t


def test_categories():
    assert [repr(c) for c in CATS] == ["DtypeCategory." + n for n in CAT_NAMES]
    assert [str(c) for c in CATS] == ["DtypeCategory." + n for n in CAT_NAMES]
    for i, (c, n) in enumerate(zip(CATS, CAT_NAMES)):
        assert isinstance(c, mx.DtypeCategory)
        assert getattr(mx.DtypeCategory, n) is c
        assert c.name == n
        assert c.value == i  # MLX's enum values
        assert pickle.loads(pickle.dumps(c)) is c
        assert c == c and hash(c) == hash(c)
    assert mx.floating != mx.inexact


# --------------------------------------------------------------- issubdtype

# issubdtype(dtype, category), rows in DTYPES order, columns in CATS order
SUBDTYPE = [
    [0, 0, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1],
    [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 0, 1, 1, 1],
    [0, 0, 0, 1, 0, 1, 1, 1], [0, 0, 0, 1, 0, 1, 1, 1], [0, 0, 0, 1, 0, 1, 1, 1],
    [0, 1, 1, 0, 0, 0, 1, 1], [0, 1, 1, 0, 0, 0, 1, 1], [0, 1, 1, 0, 0, 0, 1, 1],
    [0, 1, 1, 0, 0, 0, 1, 1], [1, 0, 1, 0, 0, 0, 1, 1],
]
# issubdtype(category, category)
SUBCAT = [
    [1, 0, 1, 0, 0, 0, 1, 1], [0, 1, 1, 0, 0, 0, 1, 1], [0, 0, 1, 0, 0, 0, 1, 1],
    [0, 0, 0, 1, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1],
    [0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0, 1],
]


def test_issubdtype_dtype_category():
    got = [[int(mx.issubdtype(t, c)) for c in CATS] for t in ALL]
    assert got == SUBDTYPE


def test_issubdtype_category_category():
    got = [[int(mx.issubdtype(a, b)) for b in CATS] for a in CATS]
    assert got == SUBCAT


def test_issubdtype_dtype_dtype_and_category_dtype():
    for i, a in enumerate(ALL):
        for j, b in enumerate(ALL):
            assert mx.issubdtype(a, b) is (i == j)
    for c in CATS:
        for t in ALL:
            assert mx.issubdtype(c, t) is False


def test_issubdtype_errors():
    with pytest.raises(ValueError, match=r"^\[issubdtype\] Received invalid type for second input\.$"):
        mx.issubdtype(mx.float32, float)
    with pytest.raises(ValueError, match=r"^\[issubdtype\] Received invalid type for first input\.$"):
        mx.issubdtype(float, mx.floating)
    with pytest.raises(ValueError, match="first input"):
        mx.issubdtype("float32", mx.floating)
    with pytest.raises(TypeError):
        mx.issubdtype(mx.float32)


# ---------------------------------------------------------------- promotion

# dtype of mx.array(0, row) + mx.array(0, column), from MLX 0.32
PROMOTION = """
    b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8
b_  b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8
u1  u1 u1 u2 u4 u8 i2 i2 i4 i8 f2 f4 f8 bf c8
u2  u2 u2 u2 u4 u8 i4 i4 i4 i8 f2 f4 f8 bf c8
u4  u4 u4 u4 u4 u8 i8 i8 i8 i8 f2 f4 f8 bf c8
u8  u8 u8 u8 u8 u8 f4 f4 f4 f4 f2 f4 f8 bf c8
i1  i1 i2 i4 i8 f4 i1 i2 i4 i8 f2 f4 f8 bf c8
i2  i2 i2 i4 i8 f4 i2 i2 i4 i8 f2 f4 f8 bf c8
i4  i4 i4 i4 i8 f4 i4 i4 i4 i8 f2 f4 f8 bf c8
i8  i8 i8 i8 i8 f4 i8 i8 i8 i8 f2 f4 f8 bf c8
f2  f2 f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f8 f4 c8
f4  f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8 f4 c8
f8  f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 c8
bf  bf bf bf bf bf bf bf bf bf f4 f4 f8 bf c8
c8  c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8
"""


def promotion_table():
    rows = PROMOTION.strip().split("\n")
    cols = rows[0].split()
    table = {}
    for row in rows[1:]:
        a, *cells = row.split()
        for b, r in zip(cols, cells):
            table[a, b] = r
    return table


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("a", ABBR)
def test_promotion_table(a):
    table = promotion_table()
    for b in ABBR:
        x, y = mx.array(0, BY_ABBR[a]), mx.array(0, BY_ABBR[b])
        assert (x + y).dtype == BY_ABBR[table[a, b]], (a, b)
        # the table is symmetric, and other binary ops promote the same way
        assert (y + x).dtype == BY_ABBR[table[a, b]], (b, a)
        assert mx.maximum(x, y).dtype == BY_ABBR[table[a, b]]
        assert mx.where(True, x, y).dtype == BY_ABBR[table[a, b]]


# ----------------------------------------------------- weak Python scalars

# For each Python scalar and operator, and each array dtype (DTYPES order):
# "scalar-first/array-first" result dtype of `op(scalar, x)` / `op(x, scalar)`,
# or the exception (Typ = TypeError, Val = ValueError), from MLX 0.32.
WEAK = """
         True add   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True sub   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True mul   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True div   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True fdiv  b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True mod   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
         True pow   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True eq    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
         True lt    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
         True and   Typ/b_ Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
         True or    Typ/b_ Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
         True xor   Typ/b_ Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
         True lsh   Typ/u1 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
         True rsh   Typ/u1 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
         True max   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True min   b_/b_ u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
         True atan2 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
         True lae   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 add   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 sub   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 mul   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 div   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 fdiv  i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 mod   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
            2 pow   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 eq    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
            2 lt    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
            2 and   Typ/i4 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
            2 or    Typ/i4 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
            2 xor   Typ/i4 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
            2 lsh   Typ/i4 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
            2 rsh   Typ/i4 Typ/u1 Typ/u2 Typ/u4 Typ/u8 Typ/i1 Typ/i2 Typ/i4 Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
            2 max   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 min   i4/i4 u1/u1 u2/u2 u4/u4 u8/u8 i1/i1 i2/i2 i4/i4 i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
            2 atan2 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
            2 lae   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 add   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 sub   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 mul   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 div   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 fdiv  f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 mod   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
          2.0 pow   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 eq    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
          2.0 lt    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
          2.0 and   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
          2.0 or    Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
          2.0 xor   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
          2.0 lsh   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
          2.0 rsh   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
          2.0 max   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 min   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
          2.0 atan2 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
          2.0 lae   f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
           2j add   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j sub   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j mul   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j div   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j fdiv  c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j mod   Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val
           2j pow   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j eq    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
           2j lt    b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
           2j and   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
           2j or    Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
           2j xor   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
           2j lsh   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
           2j rsh   Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
           2j max   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j min   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
           2j atan2 Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val Val/Val
           2j lae   c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8 c8/c8
1099511627776 add   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 sub   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 mul   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 div   f4/f4 Val/Val Val/Val Val/Val f4/f4 Val/Val Val/Val Val/Val f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 fdiv  i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 mod   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
1099511627776 pow   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 eq    b_/b_ Val/Val Val/Val Val/Val b_/b_ Val/Val Val/Val Val/Val b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
1099511627776 lt    b_/b_ Val/Val Val/Val Val/Val b_/b_ Val/Val Val/Val Val/Val b_/b_ b_/b_ b_/b_ b_/b_ b_/b_ b_/b_
1099511627776 and   Typ/i4 Typ/Val Typ/Val Typ/Val Typ/u8 Typ/Val Typ/Val Typ/Val Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
1099511627776 or    Typ/i4 Typ/Val Typ/Val Typ/Val Typ/u8 Typ/Val Typ/Val Typ/Val Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
1099511627776 xor   Typ/i4 Typ/Val Typ/Val Typ/Val Typ/u8 Typ/Val Typ/Val Typ/Val Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
1099511627776 lsh   Typ/i4 Typ/Val Typ/Val Typ/Val Typ/u8 Typ/Val Typ/Val Typ/Val Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
1099511627776 rsh   Typ/i4 Typ/Val Typ/Val Typ/Val Typ/u8 Typ/Val Typ/Val Typ/Val Typ/i8 Typ/Val Typ/Val Typ/Val Typ/Val Typ/Val
1099511627776 max   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 min   i4/i4 Val/Val Val/Val Val/Val u8/u8 Val/Val Val/Val Val/Val i8/i8 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
1099511627776 atan2 f4/f4 Val/Val Val/Val Val/Val f4/f4 Val/Val Val/Val Val/Val f4/f4 f2/f2 f4/f4 f8/f8 bf/bf Val/Val
1099511627776 lae   f4/f4 Val/Val Val/Val Val/Val f4/f4 Val/Val Val/Val Val/Val f4/f4 f2/f2 f4/f4 f8/f8 bf/bf c8/c8
"""

OPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "fdiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "eq": operator.eq,
    "lt": operator.lt, "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "lsh": operator.lshift, "rsh": operator.rshift, "max": mx.maximum, "min": mx.minimum,
    "atan2": mx.arctan2, "lae": mx.logaddexp,
}
ERRORS = {"Typ": TypeError, "Val": ValueError, "Run": RuntimeError}


def weak_rows():
    for line in WEAK.strip().split("\n"):
        sc, op, *cells = line.split()
        yield pytest.param(sc, op, cells, id=f"{sc}-{op}")


def check(expect, fn):
    if expect in ERRORS:
        with pytest.raises(ERRORS[expect]):
            fn()
    else:
        assert fn().dtype == BY_ABBR[expect]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("sc,op,cells", list(weak_rows()))
def test_weak_scalars(sc, op, cells):
    scalar = eval(sc)
    f = OPS[op]
    for t, cell in zip(ALL, cells):
        first, second = cell.split("/")
        x = mx.array(1, t)
        check(first, lambda: f(scalar, x))
        check(second, lambda: f(x, scalar))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_weak_scalar_examples():
    assert (mx.array([1, 2], mx.float16) * 2.0).dtype == mx.float16
    assert (mx.array([1, 2], mx.bfloat16) + 1).dtype == mx.bfloat16
    assert (mx.array([1, 2], mx.int32) + 1.5).dtype == mx.float32
    assert (mx.array([1, 2], mx.int8) + 1).dtype == mx.int8
    assert (mx.array([1, 2], mx.uint8) + True).dtype == mx.uint8
    assert (mx.array([True]) + 1).dtype == mx.int32
    assert (mx.array([True]) + 1.0).dtype == mx.float32
    assert (mx.array([1], mx.float64) + 1j).dtype == mx.complex64
    assert (mx.array([1, 2], mx.int32) / 2).dtype == mx.float32
    assert (mx.array([1, 2], mx.int16) / mx.array(2, mx.int16)).dtype == mx.float32
    assert (mx.array([1, 2], mx.float16) / 2).dtype == mx.float16
    assert (mx.array([7, 8], mx.int32) // 2).dtype == mx.int32
    assert (mx.array([7, 8], mx.uint16) % 3).dtype == mx.uint16
    assert (mx.array([7, 8], mx.int32) // 2.0).dtype == mx.float32
    assert (mx.array([1, 2]) ** 2).dtype == mx.int32
    assert (mx.array([1, 2]) ** 0.5).dtype == mx.float32
    assert (2 ** mx.array([1, 2])).tolist() == [2, 4]
    # two Python scalars: both take their own default dtype
    assert mx.add(1, 2).dtype == mx.int32
    assert mx.add(1, 2.5).dtype == mx.float32
    assert mx.add(True, False).dtype == mx.bool_
    assert mx.add(2**40, 1).dtype == mx.int64
    assert mx.add(1, 1j).dtype == mx.complex64


def test_weak_int_overflow():
    with pytest.raises(ValueError, match=r"^Converting 300 to int8 would result in overflow\.$"):
        mx.array([1], mx.int8) + 300
    with pytest.raises(ValueError, match=r"^Converting -1 to uint8 would result in overflow\.$"):
        mx.array([1], mx.uint8) - (-1)
    with pytest.raises(ValueError, match=r"^Converting 2147483648 to int32 would result in overflow\.$"):
        mx.array([1]) == 2**31
    with pytest.raises(ValueError, match="to uint32 would result in overflow"):
        mx.maximum(mx.array([1], mx.uint32), 2**32)
    with pytest.raises(ValueError, match="Converting 1000 to int8"):
        mx.where(mx.array([True]), mx.array([1], mx.int8), 1000)
    assert (mx.array([1], mx.int8) + 127).tolist() == [-128]  # in range, wraps
    assert (mx.array([1], mx.uint8) + 255).tolist() == [0]
    assert (mx.array([True]) + 2**40).dtype == mx.int32  # bool partner: no check, as MLX
    assert (mx.array([1], mx.uint64) + (-1)).tolist() == [0]  # 8-byte: no check
    # beyond int64, MLX fails converting the int (std::bad_cast); mkpy says so (OverflowError)
    with pytest.raises(OverflowError, match="does not fit int64"):
        mx.array([1], mx.int64) + 2**63
    with pytest.raises(OverflowError, match="does not fit int64"):
        mx.array([1.0]) + 2**70


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_weak_float_keeps_precision_of_float64():
    assert (mx.array(1.0, mx.float64) + 0.1).item() == 1.1
    assert (mx.array(1.0, mx.float32) + 0.1).item() == pytest.approx(1.1, rel=1e-7)


def test_numpy_operand_takes_the_array_dtype():
    np = pytest.importorskip("numpy")
    r = mx.array([1, 2]) + np.array([1.5, 2.5])
    assert r.dtype == mx.int32 and r.tolist() == [2, 4]
    r = mx.array([1, 2], mx.int8) + np.array([1000, 2])
    assert r.dtype == mx.int8 and r.tolist() == [-23, 4]
    assert (mx.array([True]) + np.array([1.5])).tolist() == [True]
    assert (mx.array([1], mx.int8) + np.int64(1000)).tolist() == [-23]  # numpy scalar: no check
    # a numpy float64 scalar is a Python float: weak
    assert (mx.array([1], mx.float16) + np.float64(1.5)).dtype == mx.float16
    assert (mx.array([1], mx.int8) + np.float64(1.5)).dtype == mx.float32
    # with no mkpy array on either side, each keeps its own dtype
    assert mx.add(np.array([1, 2], np.int8), 1000).tolist() == [1001, 1002]
