/* Which pieces of the CUDA runtime header a kernel needs.
 *
 * NVRTC parses the whole runtime header (mkpy_cuda.h and mkpy_metal.h, some
 * 3,000 lines of templates) for every new kernel, and that parse is most of a
 * new kernel's compile (docs/performance.md, "A new kernel's compile"). The
 * header's optional pieces are regions `#ifndef MKPY_..._NO_X ... #endif`
 * (mkpy_cuda.h lists them), the swizzle members of the vector types are
 * chosen by MKPY_METAL_SWIZZLES, and the math section's functions one name at
 * a time (MKPY_METAL_MATH_NAMES, MKPY_METAL_WANT_<name>: mkpy_metal.h's
 * MK_WANT); a program leaves out what the kernel's text names nothing of. The test is on names only (no types are known here):
 * every identifier of the translated kernel (its header, signature and
 * source, comments included) against each piece's names and name prefixes.
 * A name that a table below lacks makes the program fail to compile, never
 * compile differently (a piece holds whole overload sets, and CUDA's own
 * global names are renamed away by mkpy_cuda_std.h), and mkb_cuda_build then
 * compiles the program with every piece (nvrtc.c); compile-check mode does
 * not, so that the test corpus finds such gaps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"

enum { P_MATH, P_MLX, P_SIMD, P_BARRIERS, P_ATOMICS, P_MATRIX, NPARTS };

static const struct {
    const char *macro;    /* defined by a program that leaves the piece out */
    unsigned needs;       /* pieces it uses */
    const char *names;    /* the names it declares, space-separated */
    const char *prefixes; /* and the prefixes of those made by token pasting */
} parts[NPARTS] = {
    /* mkpy_metal.h section 5: every function of it (MK_UN(name, ...) and the like, and the
     * inline ones) */
    [P_MATH] = {"MKPY_METAL_NO_MATH", 0,
                "abs absdiff acos acosh addsat all any asin asinh atan atan2 atanh ceil clamp clz copysign cos "
                "cosh cospi cross ctz distance distance_squared divide dot erf exp exp10 exp2 extract_bits fabs "
                "faceforward fdim floor fma fmax fmax3 fmedian3 fmin fmin3 fmod fract frexp hadd ilogb "
                "insert_bits isfinite isinf isnan isnormal isordered isunordered ldexp length length_squared log "
                "log10 log2 mad24 madhi madsat max max3 median3 min min3 mix modf mul24 mulhi nextafter normalize "
                "popcount pow powr reflect refract reverse_bits rhadd rint rotate round rsqrt saturate select sign "
                "signbit sin sincos sinh sinpi smoothstep sqrt step subsat tan tanh tanpi trunc",
                ""},
    /* mkpy_metal.h section 8, MLX's utilities */
    [P_MLX] = {"MKPY_METAL_NO_MLX", 1u << P_MATH,
               "METAL_FUNC MTL_CONST MLX_MTL_PRAGMA_UNROLL MAX_REDUCE_SPECIALIZED_DIMS REDUCE_N_READS "
               "REDUCE_N_WRITES SOFTMAX_N_READS RMS_N_READS RMS_LOOPED_LIMIT bfloat16_to_uint16 uint16_to_bfloat16 "
               "WorkPerThread Limits ceildiv log1p ConditionalType LoopedElemToLoc mlx os_log",
               "complex64 can_convert_ elem_to_loc"},
    /* mkpy_cuda.h: simd_sum, quad_ballot, simd_vote, ... (made by MKPY_GROUP_FUNCTIONS) */
    [P_SIMD] = {"MKPY_CUDA_NO_SIMD", 1u << P_MATH, "", "simd_ quad_"},
    [P_BARRIERS] = {"MKPY_CUDA_NO_BARRIERS", 0, "simdgroup_barrier", "threadgroup_barrier"},
    /* atomic<T>, atomic_int, atomic_fetch_add_explicit, ... */
    [P_ATOMICS] = {"MKPY_CUDA_NO_ATOMICS", 0, "", "atomic memory_order thread_scope"},
    [P_MATRIX] = {"MKPY_CUDA_NO_MATRIX", 1u << P_SIMD, "make_filled_simdgroup_matrix",
                  "simdgroup_matrix simdgroup_float simdgroup_half simdgroup_bfloat simdgroup_load "
                  "simdgroup_store simdgroup_multiply"},
};

/* The index of the identifier id[0..n) among the space-separated words of list (equal to one,
 * or, with prefix, starting with one), or -1. */
static int listed(const char *list, const char *id, size_t n, bool prefix) {
    int i = 0;
    for (const char *w = list; *w; i++) {
        const char *e = strchr(w, ' ');
        size_t len = e ? (size_t)(e - w) : strlen(w);
        if (len && (prefix ? n >= len : n == len) && memcmp(w, id, len) == 0) return i;
        w += len;
        while (*w == ' ') w++;
    }
    return -1;
}

/* Word i of a space-separated list, into out[0..size). */
static void word(const char *list, int i, char *out, size_t size) {
    const char *w = list;
    for (; i > 0; i--) w = strchr(w, ' ') + 1;
    const size_t len = strcspn(w, " ");
    snprintf(out, size, "%.*s", (int)(len < size ? len : size - 1), w);
}

/* The swizzle set (MKPY_METAL_SWIZZLES's bit) that the identifier id[0..n) could be: 2 to 4
 * letters all of xyzw or all of rgba; 0 for anything else. */
static unsigned swizzle_bit(const char *id, size_t n) {
    if (n < 2 || n > 4) return 0;
    const bool xyzw = strspn(id, "xyzw") >= n, rgba = strspn(id, "rgba") >= n;
    return xyzw ? 1u << (n - 2) : rgba ? 8u << (n - 2) : 0;
}

bool mkb_cuda_parts_defines(mkk_sbuf *b, const char *text, size_t len) {
    unsigned used = 0, swizzles = 0;
    bool math[256] = {false}; /* the math functions named, by their index in parts[P_MATH].names */
    const char *p = text, *end = text + len;
    while (p < end) {
        const char c = *p;
        if (c >= '0' && c <= '9') { /* a number, with its suffix and exponent (1.0f, 0x1p3) */
            while (p < end && (*p == '_' || *p == '.' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                               (*p >= 'A' && *p <= 'Z')))
                p++;
            continue;
        }
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            p++;
            continue;
        }
        const char *id = p;
        while (p < end && (*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            p++;
        const size_t n = (size_t)(p - id);
        swizzles |= swizzle_bit(id, n);
        const int m = listed(parts[P_MATH].names, id, n, false);
        if (m >= 0 && m < 256) math[m] = true;
        for (int i = 0; i < NPARTS; i++)
            if (!(used >> i & 1u) && (listed(parts[i].names, id, n, false) >= 0 ||
                                      listed(parts[i].prefixes, id, n, true) >= 0))
                used |= 1u << i;
    }
    for (bool grew = true; grew;) { /* and what those pieces use */
        grew = false;
        for (int i = 0; i < NPARTS; i++)
            if ((used >> i & 1u) && (used | parts[i].needs) != used) used |= parts[i].needs, grew = true;
    }
    if (swizzles != 63) mkk_sbf(b, "#define MKPY_METAL_SWIZZLES %u\n", swizzles);
    for (int i = 0; i < NPARTS; i++)
        if (!(used >> i & 1u)) mkk_sbf(b, "#define %s 1\n", parts[i].macro);
    /* the math section's functions one by one (mkpy_metal.h's MK_WANT), unless MLX's utilities,
     * which use many of them, are in; the SIMD-group functions use min and max */
    const bool by_name = (used >> P_MATH & 1u) && !(used >> P_MLX & 1u);
    if (by_name) {
        mkk_sb(b, "#define MKPY_METAL_MATH_NAMES 1\n");
        if (used >> P_SIMD & 1u)
            math[listed(parts[P_MATH].names, "min", 3, false)] = math[listed(parts[P_MATH].names, "max", 3, false)] = true;
        for (int i = 0; i < 256; i++)
            if (math[i]) {
                char w[64];
                word(parts[P_MATH].names, i, w, sizeof w);
                mkk_sbf(b, "#define MKPY_METAL_WANT_%s 1\n", w);
            }
    }
    return swizzles != 63 || used != (1u << NPARTS) - 1 || by_name;
}
