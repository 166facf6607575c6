"""What fails on a Mac fails here (issues #11 and #17): metal_kernel's arguments follow MLX's
conversion rules, bad arguments raise TypeError/ValueError/UnicodeEncodeError (never
SystemError or a crash), constructs Metal's compiler rejects are refused at the user's line,
Metal's limits hold, and an opt-out turns the Metal-only checks off."""
import os

import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY = "uint i = thread_position_in_grid.x;\nout[i] = inp[i];"


def kernel(name="copy", source=COPY, header="", **kw):
    return mx.fast.metal_kernel(name=name, input_names=["inp"], output_names=["out"], source=source,
                                header=header, **kw)


def call(k, x=None, **kw):
    x = mx.arange(4, dtype=mx.float32) if x is None else x
    args = dict(inputs=[x], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=(4, 1, 1),
                threadgroup=(4, 1, 1))
    args.update(kw)
    return k(**args)


# ------------------------------------------------------------------ grid, threadgroup, shapes

def test_float_scalar_grid_is_a_type_error_with_a_hint():
    n = mx.array(8, dtype=mx.uint32)
    g = mx.divide(n, n)  # true division: a float32 scalar
    assert g.dtype == mx.float32
    k = kernel("fgrid")
    for what in ("grid", "threadgroup"):
        with pytest.raises(TypeError) as e:
            call(k, **{what: (g, 1, 1)})
        msg = str(e.value)
        assert f"`{what}` entries must be ints" in msg and "float32" in msg, msg
        assert "//" in msg and "mx.floor_divide" in msg, msg
    with pytest.raises(TypeError, match="not a float.*floor_divide"):
        call(k, grid=(4.0, 1, 1))
    import numpy as np
    for v in (np.float32(4), np.float64(4)):
        with pytest.raises(TypeError, match=r"not a .*float.*floor_divide"):
            call(k, grid=(v, 1, 1))
    with pytest.raises(TypeError, match=r"`output_shapes` entries must be ints.*floor_divide"):
        call(k, output_shapes=[(g,)])


def test_integer_scalars_and_index_objects_are_accepted():
    import numpy as np
    k = kernel("igrid")
    four = mx.array(4, dtype=mx.uint32)
    one = mx.floor_divide(four, four)
    assert one.dtype == mx.uint32
    x = mx.arange(4, dtype=mx.float32)
    (out,) = call(k, x, grid=(four, one, one), threadgroup=(four, one, np.int64(1)), output_shapes=[(four,)])
    assert out.shape == (4,) and out.tolist() == x.tolist()


@pytest.mark.parametrize("bad", ["4", b"4", None, [4], mx.array([4, 1]), object()])
def test_non_int_entries_are_type_errors(bad):
    k = kernel("badentry")
    with pytest.raises(TypeError):
        call(k, grid=(bad, 1, 1))
    with pytest.raises(TypeError):
        call(k, threadgroup=(1, bad, 1))


@pytest.mark.parametrize("bad", [4, (4, 1), "abc", None, (4, 1, 1, 1)])
def test_grid_must_be_three_ints(bad):
    with pytest.raises(TypeError, match="must be a tuple of 3 ints"):
        call(kernel("g3"), grid=bad)


def test_huge_entries_are_value_errors_not_wraps():
    k = kernel("huge")
    with pytest.raises(ValueError, match="out of range"):
        call(k, grid=(2**64, 1, 1))
    with pytest.raises(ValueError, match="out of range"):
        call(k, output_shapes=[(2**70,)])
    (out,) = call(k, threadgroup=(2**62, 4, 1))
    with pytest.raises(ValueError, match=r"^Thread group size \(4611686018427387904 \* 4 \* 1\) is greater than"):
        mx.eval(out)
    (out,) = call(k, threadgroup=(2**32, 2**32, 1))
    with pytest.raises(ValueError, match="Thread group size"):
        mx.eval(out)
    (out,) = call(k, grid=(2**32, 1, 1))
    with pytest.raises(ValueError, match="below 2"):
        mx.eval(out)


def test_output_too_large_is_refused_at_the_call():
    k = kernel("bigout")
    with pytest.raises(MemoryError, match="bytes"):
        call(k, output_shapes=[(2**40,)])
    with pytest.raises((MemoryError, ValueError)):
        call(k, output_shapes=[(2**31, 2**31)])
    with pytest.raises(ValueError, match="Negative"):
        call(k, output_shapes=[(-1,)])


# ------------------------------------------------------------------ strings and templates

@pytest.mark.parametrize("field", ["name", "source"])
def test_required_strings_none_is_a_type_error(field):
    args = dict(name="k", input_names=["inp"], output_names=["out"], source=COPY)
    args[field] = None
    with pytest.raises(TypeError, match=f"`{field}` must be a string"):
        mx.fast.metal_kernel(**args)
    args[field] = 5
    with pytest.raises(TypeError, match=f"`{field}` must be a string"):
        mx.fast.metal_kernel(**args)


@pytest.mark.parametrize("field", ["name", "source", "header", "input_names", "output_names"])
def test_surrogates_and_nul_bytes(field):
    def make(value):
        args = dict(name="k", input_names=["inp"], output_names=["out"], source=COPY, header="")
        args[field] = [value] if field.endswith("names") else value
        return mx.fast.metal_kernel(**args)
    with pytest.raises(UnicodeEncodeError):
        make("a\ud800")
    with pytest.raises(ValueError, match="NUL"):
        make("out\0" if field.endswith("names") else "x\0y")


@pytest.mark.parametrize("bad", ["inp", b"inp", None, 3, [None], ["a", 3]])
def test_name_lists_must_be_lists_of_strings(bad):
    with pytest.raises(TypeError, match="must be a list of strings"):
        mx.fast.metal_kernel(name="k", input_names=bad, output_names=["out"], source=COPY)
    with pytest.raises(TypeError, match="must be a list of strings"):
        mx.fast.metal_kernel(name="k", input_names=["inp"], output_names=bad, source=COPY)


def test_odd_kernel_names_fail_cleanly():
    for name in ['a"b', "a\\b", "a\nb", "a b", "é", "x" * 5000]:
        k = kernel(name)
        try:
            (out,) = call(k)
            mx.eval(out)
        except RuntimeError:
            pass  # a compile error, as Metal gives for a name that is no identifier


def test_nul_in_source_never_truncates():
    # the text after the NUL would have been lost silently
    with pytest.raises(ValueError, match=r"`source` contains a NUL"):
        kernel("nul", source="uint i = thread_position_in_grid.x;\0 out[i] = inp[i];")


def test_template_names_and_values():
    k = kernel("tmpl", source="uint i = thread_position_in_grid.x;\nout[i] = T(inp[i]) * N;")
    with pytest.raises(UnicodeEncodeError):
        call(k, template=[("\ud800", 1)])
    with pytest.raises(ValueError, match="NUL"):
        call(k, template=[("T\0", mx.float32)])
    with pytest.raises(ValueError, match="Invalid template argument"):
        call(k, template=[("N", 2**40)])
    with pytest.raises(ValueError, match="Invalid template argument"):
        call(k, template=[("N", 1.5)])
    with pytest.raises(TypeError, match="list of"):
        call(k, template=[("N",)])
    with pytest.raises(TypeError, match="list of"):
        call(k, template="N")
    with pytest.raises(ValueError, match=r"Template argument `T` is float64: Metal does not support double"):
        call(k, template=[("T", mx.float64), ("N", 2)])
    (out,) = call(k, template=[("T", mx.float32), ("N", 2)])
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_float64_buffers_raise_mlx_error():
    k = kernel("f64")
    with pytest.raises(ValueError, match=r"^float64 is not supported on the GPU$"):
        call(k, mx.arange(4, dtype=mx.float64))
    with pytest.raises(ValueError, match=r"^float64 is not supported on the GPU$"):
        call(k, output_dtypes=[mx.float64])


def test_compile_option_types():
    with pytest.raises(TypeError, match="allow_non_metal"):
        kernel("opt", compile_options={"allow_non_metal": "yes"})
    with pytest.raises(ValueError, match="Unknown compile option"):
        kernel("opt", compile_options={1: 2})
    with pytest.raises(ValueError, match="Invalid math_mode"):
        kernel("opt", compile_options={"math_mode": "\ud800"})


# ------------------------------------------------------------------ refused constructs

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"

# (id, source, header, message fragment, "source"/"header", line)
REFUSED = [
    ("double", "uint i = thread_position_in_grid.x;\ndouble d = inp[i];\nout[i] = d;", "", "`double`", "source", 2),
    ("long_double", "uint i = thread_position_in_grid.x;\nlong double d = inp[i];\nout[i] = d;", "",
     "`long double`", "source", 2),
    ("goto", "uint i = thread_position_in_grid.x;\nif (i > 2) goto end;\nout[i] = inp[i];\nend: return;", "",
     "`goto`", "source", 2),
    ("recursion", "uint i = thread_position_in_grid.x;\nout[i] = fact(int(inp[i]));",
     HEAD + "inline int fact(int n) {\n  return n <= 1 ? 1 : n * fact(n - 1);\n}\n", "recursion", "header", 3),
    ("mutual_recursion", "uint i = thread_position_in_grid.x;\nout[i] = ping(int(inp[i]));",
     HEAD + "int pong(int n);\nint ping(int n) { return n <= 0 ? 0 : pong(n - 1); }\n"
     "int pong(int n) { return n <= 0 ? 1 : ping(n - 1); }\n", "recursion", "header", 4),
    ("function_pointer", "uint i = thread_position_in_grid.x;\nout[i] = apply(twice, inp[i]);",
     HEAD + "float twice(float x) { return 2 * x; }\nfloat apply(float (*f)(float), float x) { return f(x); }\n",
     "function pointers", "header", 4),
    ("virtual", "uint i = thread_position_in_grid.x;\nout[i] = inp[i];",
     HEAD + "struct Op {\n  virtual float run(float x) const { return x; }\n};\n", "virtual functions", "header", 4),
    ("throw", "uint i = thread_position_in_grid.x;\nif (inp[i] < 0) throw 1;\nout[i] = inp[i];", "",
     "exceptions", "source", 2),
    ("try", "uint i = thread_position_in_grid.x;\ntry { out[i] = inp[i]; } catch (...) {}", "",
     "exceptions", "source", 2),
    ("new", "uint i = thread_position_in_grid.x;\nfloat *p = new float[4];\nout[i] = inp[i];", "",
     "`new`", "source", 2),
    ("delete", "uint i = thread_position_in_grid.x;\nthread float *p = 0;\ndelete p;\nout[i] = inp[i];", "",
     "`delete`", "source", 3),
    ("malloc", "uint i = thread_position_in_grid.x;\nvoid *p = malloc(16);\nout[i] = inp[i];",
     "#include <stdlib.h>\n", "#include <stdlib.h>", "header", 1),
    ("malloc_no_include", "uint i = thread_position_in_grid.x;\nthread void *p = malloc(16);\nout[i] = inp[i];",
     "", "`malloc`", "source", 2),
    ("free", "uint i = thread_position_in_grid.x;\nfree(0);\nout[i] = inp[i];", "", "`free`", "source", 2),
    ("stdio_printf", "uint i = thread_position_in_grid.x;\nprintf(\"%d\", i);\nout[i] = inp[i];",
     "#include <stdio.h>\n", "#include <stdio.h>", "header", 1),
    ("printf", "uint i = thread_position_in_grid.x;\n  printf(\"%d\", i);\nout[i] = inp[i];", "",
     "`printf`", "source", 2),
    ("cpp_header", COPY, HEAD + "#include <cmath>\n", "#include <cmath>", "header", 3),
    ("quoted_include", COPY, "#include \"helpers.h\"\n", "#include \"helpers.h\"", "header", 1),
    ("pointer_no_space", "uint i = thread_position_in_grid.x;\nout[i] = first(inp + i);",
     HEAD + "\ninline float first(const float* p) { return p[0]; }\n", "pointers without an address space",
     "header", 4),
    ("program_scope_var", "uint i = thread_position_in_grid.x;\nout[i] = inp[i] + counter;",
     HEAD + "float counter = 0;\n", "program scope variable must reside in constant address space", "header", 3),
    ("program_scope_threadgroup", "uint i = thread_position_in_grid.x;\nt[0] = inp[i];\nout[i] = inp[i];",
     HEAD + "threadgroup float t[12000];\n", "program scope variable must reside in constant address space",
     "header", 3),
    ("program_scope_static", COPY, HEAD + "\nstatic int calls;\n",
     "program scope variable must reside in constant address space", "header", 4),
]


@pytest.mark.parametrize("name,source,header,fragment,where,line", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_at_the_users_line(name, source, header, fragment, where, line):
    k = kernel(name, source=source, header=header)
    (out,) = call(k)
    with pytest.raises(RuntimeError) as e:
        mx.eval(out)
    msg = str(e.value)
    assert f"<kernel {name} {where}>:{line}:" in msg, msg
    assert fragment in msg, msg
    if "program scope" not in fragment:
        assert "Metal does not support" in msg, msg
    assert "allow_non_metal" in msg and f"Kernel `{name}`" in msg, msg
    assert "test_kernel_parity.py" in msg, msg  # the Python call site


ACCEPTED = [
    ("comment_and_string", "uint i = thread_position_in_grid.x; // double goto malloc(1) printf(x)\n"
     "/* new delete throw virtual (*f)(x) */ const constant char *s = \"double goto\";\n(void)s;\n"
     "out[i] = inp[i];", ""),
    ("include_with_comment", COPY, "#include <metal_stdlib>  // Metal's library\n#include <metal_simdgroup>\n"
     "  #  include <metal_math> /* more */\nusing namespace metal;\n"),
    ("half_and_long", "uint i = thread_position_in_grid.x;\nhalf h = half(inp[i]);\nlong l = long(i) - long(i);\n"
     "out[i] = float(h) + float(l);", ""),
    ("constant_program_scope", "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * SCALE + K[0] - N + M;",
     HEAD + "constant float SCALE = 1.0f;\nconstant float K[2] = {0.0f, 1.0f};\nconstexpr constant int N = 0;\n"
     "constexpr int M = 0;\n"),
    ("types_and_functions", "uint i = thread_position_in_grid.x;\nPair p = make(inp[i]);\nout[i] = p.a + twice(p.b);",
     HEAD + "struct Pair {\n  float a = 0;\n  float b;\n  Pair() = default;\n  Pair(const Pair&) = default;\n};\n"
     "enum class Mode : int { A, B };\ntypedef float real;\nusing vec = float4;\n"
     "template <typename T> T twice(T x) { return x + x - x - x; }\n"
     "inline Pair make(float v) { Pair p; p.a = v; p.b = 0; return p; }\n"
     "inline float first(device const float* p, thread float& acc, constant float* c) { return p[0]; }\n"
     "struct S { static constexpr constant int n = 1; float f(thread float* q) const { return *q; } };\n"),
    ("names_like_banned_words", "uint i = thread_position_in_grid.x;\nfloat free_slots = 0, doubled = 2;\n"
     "float newer = 1;\nout[i] = inp[i] + free_slots + doubled - 2 + newer - 1;", ""),
    ("overloads_are_not_recursion", "uint i = thread_position_in_grid.x;\nout[i] = sum2(float2(inp[i], 0));",
     HEAD + "inline float sum2(float x) { return x; }\ninline float sum2(float2 v) { return sum2(v.x) + sum2(v.y); }\n"),
]


@pytest.mark.parametrize("name,source,header", ACCEPTED, ids=[r[0] for r in ACCEPTED])
def test_metal_code_is_not_refused(name, source, header):
    k = kernel(name, source=source, header=header)
    x = mx.arange(4, dtype=mx.float32)
    (out,) = call(k, x)
    assert out.tolist() == x.tolist()


def test_machine_made_headers_are_scanned():
    # thousands of functions and a megabyte of text: the scan stays linear (the recursion
    # search skips headers of more than 512 functions)
    header = HEAD + "".join(f"inline float f{i}(float x) {{ return x + {i}; }}\n" for i in range(3000))
    kernel("many_functions", header=header)
    kernel("long_source", source=COPY + "\n" + "// filler\n" * 100000)
    with pytest.raises(ValueError, match="NUL"):
        kernel("long_nul", source="x" * 10**6 + "\0")


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_opt_out_compile_option_and_environment(monkeypatch):
    src = "uint i = thread_position_in_grid.x;\ndouble d = double(inp[i]) * 2.0;\nout[i] = float(d);"
    x = mx.arange(4, dtype=mx.float32)
    (out,) = call(kernel("optout_refused", source=src), x)
    with pytest.raises(RuntimeError, match="Metal does not support `double`"):
        mx.eval(out)
    (out,) = call(kernel("optout_option", source=src, compile_options={"allow_non_metal": True}), x)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
    monkeypatch.setenv("MKPY_ALLOW_NON_METAL", "1")
    (out,) = call(kernel("optout_env", source=src), x)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
    # the option wins over the environment
    (out,) = call(kernel("optout_env_off", source=src, compile_options={"allow_non_metal": False}), x)
    with pytest.raises(RuntimeError, match="Metal does not support"):
        mx.eval(out)
    # float64 templates and buffers are allowed with the opt-out too
    k = kernel("optout_f64", source="uint i = thread_position_in_grid.x;\nout[i] = inp[i] * T(2);",
               compile_options={"allow_non_metal": True})
    (out,) = k(inputs=[mx.arange(4, dtype=mx.float64)], output_shapes=[(4,)], output_dtypes=[mx.float64],
               grid=(4, 1, 1), threadgroup=(4, 1, 1), template=[("T", mx.float64)])
    assert out.dtype == mx.float64 and out.tolist() == [0.0, 2.0, 4.0, 6.0]


# ------------------------------------------------------------------ Metal's limits

def test_buffer_count_limit():
    names = [f"a{i}" for i in range(31)]
    k = mx.fast.metal_kernel(name="many", input_names=names, output_names=["out"],
                             source="out[thread_position_in_grid.x] = a0[0];")
    (out,) = k(inputs=[mx.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])] * 31, output_shapes=[(1,)],
               output_dtypes=[mx.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    with pytest.raises(RuntimeError, match=r"takes 32 buffers.*more than the 31"):
        mx.eval(out)
    k = mx.fast.metal_kernel(name="many_ok", input_names=names[:30], output_names=["out"],
                             source="out[thread_position_in_grid.x] = a0[0];")
    (out,) = k(inputs=[mx.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])] * 30, output_shapes=[(1,)],
               output_dtypes=[mx.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    assert out.tolist() == [1.0]


DIVERGE_ONE_LINE = """
uint t = thread_position_in_threadgroup.x;
tile[t] = inp[t];
if (t < 16) { threadgroup_barrier(mem_flags::mem_threadgroup); } else { threadgroup_barrier(mem_flags::mem_threadgroup); }
out[t] = tile[31 - t];
"""


@pytest.mark.parametrize("engine", ["lockstep", "fibers"])
def test_two_barriers_on_one_line_are_told_apart(engine, monkeypatch):
    if engine == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    k = mx.fast.metal_kernel(name=f"diverge_line_{engine}", input_names=["inp"], output_names=["out"],
                             source="threadgroup float tile[32];" + DIVERGE_ONE_LINE)
    (out,) = k(inputs=[mx.arange(32, dtype=mx.float32)], output_shapes=[(32,)], output_dtypes=[mx.float32],
               grid=(32, 1, 1), threadgroup=(32, 1, 1))
    with pytest.raises(RuntimeError) as e:
        mx.eval(out)
    msg = str(e.value)
    assert "different barriers" in msg, msg
    # both barriers are on line 4, told apart by their columns
    assert f"<kernel diverge_line_{engine} source>:4:" in msg, msg
    assert msg.count(":4:") >= 2, msg


TG_HEADER = """
#include <metal_stdlib>
using namespace metal;
inline float stage(float v, uint t) {
    threadgroup float half_of_it[4500];
    half_of_it[t] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return half_of_it[t];
}
"""


@pytest.mark.parametrize("engine", ["lockstep", "fibers"])
def test_threadgroup_limit_counts_the_headers_declarations(engine, monkeypatch):
    """4500 floats in a header function plus 4500 in the source: 36000 bytes > 32 KiB."""
    if engine == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    k = mx.fast.metal_kernel(name=f"tg_header_{engine}", input_names=["inp"], output_names=["out"],
                             header=TG_HEADER, source="threadgroup float mine[4500];\n"
                             "uint t = thread_position_in_threadgroup.x;\nmine[t] = stage(inp[t], t);\n"
                             "threadgroup_barrier(mem_flags::mem_threadgroup);\nout[t] = mine[t];")
    (out,) = k(inputs=[mx.arange(32, dtype=mx.float32)], output_shapes=[(32,)], output_dtypes=[mx.float32],
               grid=(32, 1, 1), threadgroup=(32, 1, 1))
    with pytest.raises(RuntimeError, match=r"threadgroup memory reaches 36000 bytes.*32768 bytes \(32 KiB\)"):
        mx.eval(out)
