/* metal_kernel nodes in export_function's files: MLX's CustomKernel record.
 *
 * MLX records a kernel call as the generated Metal source and the kernel name
 * it made (custom_kernel_<name>[_<template hash>]_<input and output types>),
 * the grid and threadgroup, which of _shape/_strides/_ndim each input passes,
 * ensure_row_contiguous, init_value and the math mode. Export generates the
 * same text with mkk_generate. Import parses that text back into what
 * metal_kernel(...) and the call were given (header, body, input and output
 * names, atomic outputs, template arguments), makes the kernel and the call
 * with them and checks that generating the source again gives the recorded
 * one byte for byte; the call then goes through mkk_make_outputs, the path of
 * a direct call (same caches, same engines). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/check.h"
#include "core/export.h"
#include "kernel.h"

void mk_xkernel_info_free(mk_xkernel_info *info) {
    free(info->name);
    free(info->source);
    free(info->shape_infos);
    memset(info, 0, sizeof *info);
}

int mk_xp_kernel(const mk_prim *p, mk_xkernel_info *info) {
    mkk_kernel *k;
    mkk_call *c;
    memset(info, 0, sizeof *info);
    if (!mkk_node_params(p, &k, &c)) return 0;
    /* MLX's grid and threadgroup are C ints */
    for (int d = 0; d < 3; d++)
        if (c->grid[d] < 0 || c->grid[d] > INT32_MAX || c->threadgroup[d] < 0 || c->threadgroup[d] > INT32_MAX) {
            mk_error_set(MK_ERR_VALUE,
                         "[export_function] Kernel `%s`: the grid and threadgroup must fit in 32-bit ints to be "
                         "exported.",
                         k->name);
            return -1;
        }
    if (mkk_generate(k, c, p->inputs, &info->source, &info->name) < 0) return -1;
    info->nin = k->ninputs;
    if (!(info->shape_infos = malloc(sizeof *info->shape_infos * (size_t)(k->ninputs ? k->ninputs : 1)))) {
        mk_xkernel_info_free(info);
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < k->ninputs; i++)
        for (int j = 0; j < 3; j++) info->shape_infos[i][j] = k->shape_info[i][j];
    for (int d = 0; d < 3; d++) {
        info->grid[d] = (int32_t)c->grid[d];
        info->threadgroup[d] = (int32_t)c->threadgroup[d];
    }
    info->ensure_row_contiguous = k->ensure_row_contiguous;
    info->has_init = c->has_init;
    info->init_value = (float)c->init_value;
    info->math_mode = (int)k->math_mode;
    return 1;
}

/* ------------------------------------------------------------- import */

static int bad(const char *kname, const char *what) {
    mk_error_set(MK_ERR_VALUE, "[import_function] Invalid CustomKernel record for `%.200s`: %s.", kname, what);
    return -1;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return mk_nomem();
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* the last occurrence of `needle` in text[0, n) */
static const char *find_last(const char *text, size_t n, const char *needle) {
    const char *last = NULL;
    size_t m = strlen(needle);
    for (const char *p = text; (p = strstr(p, needle)) && p + m <= text + n; p++) last = p;
    return last;
}

/* the parameter's name in one line of the signature ("  <type> <name> [[...]]") */
static char *param_name(const char *line, size_t n) {
    const char *at = NULL;
    for (size_t i = 0; i + 3 <= n; i++)
        if (!memcmp(line + i, " [[", 3)) {
            at = line + i;
            break;
        }
    if (!at) return NULL;
    const char *b = at;
    while (b > line && b[-1] != ' ') b--;
    if (b == at) return NULL;
    return dup_n(b, (size_t)(at - b));
}

typedef struct {
    char *header, *body;
    char **in_names, **out_names;
    bool atomic;
    int ntemplate;
    mkk_targ *templ;
} parsed;

static void parsed_free(parsed *p, int nin, int nout) {
    free(p->header);
    free(p->body);
    for (int i = 0; p->in_names && i < nin; i++) free(p->in_names[i]);
    for (int i = 0; p->out_names && i < nout; i++) free(p->out_names[i]);
    free(p->in_names);
    free(p->out_names);
    for (int i = 0; i < p->ntemplate; i++) free(p->templ[i].name);
    free(p->templ);
}

/* "typename T, int N" and "<float, 3>" -> template arguments */
static int parse_template(const char *kname, const char *params, size_t np, const char *values, size_t nv,
                          parsed *out) {
    int n = 1;
    for (size_t i = 0; i < np; i++) n += params[i] == ',';
    int nvals = 1;
    for (size_t i = 0; i < nv; i++) nvals += values[i] == ',';
    if (n != nvals || np == 0 || nv == 0) return bad(kname, "the template parameters and values do not match");
    if (!(out->templ = calloc((size_t)n, sizeof *out->templ))) {
        mk_nomem();
        return -1;
    }
    const char *p = params, *pe = params + np, *v = values, *ve = values + nv;
    for (int i = 0; i < n; i++) {
        const char *pc = memchr(p, ',', (size_t)(pe - p)), *vc = memchr(v, ',', (size_t)(ve - v));
        if (!pc) pc = pe;
        if (!vc) vc = ve;
        while (p < pc && *p == ' ') p++;
        while (v < vc && *v == ' ') v++;
        const char *sp = memchr(p, ' ', (size_t)(pc - p));
        if (!sp || sp + 1 >= pc) return bad(kname, "a template parameter");
        mkk_targ *t = &out->templ[i];
        size_t kl = (size_t)(sp - p), vl = (size_t)(vc - v);
        if (!(t->name = dup_n(sp + 1, (size_t)(pc - sp - 1)))) return -1;
        out->ntemplate = i + 1;
        char val[64];
        if (vl == 0 || vl >= sizeof val) return bad(kname, "a template value");
        memcpy(val, v, vl);
        val[vl] = 0;
        if (kl == 8 && !memcmp(p, "typename", 8)) {
            t->kind = MKK_TARG_DTYPE;
            int found = -1;
            for (int d = 0; d < MK_NDTYPES && found < 0; d++)
                if (mk_dtypes[d].msl_name && !strcmp(mk_dtypes[d].msl_name, val)) found = d;
            if (found < 0) return bad(kname, "a template type");
            t->value = found;
        } else if ((kl == 3 && !memcmp(p, "int", 3)) || (kl == 4 && !memcmp(p, "bool", 4))) {
            char *end;
            long long x = strtoll(val, &end, 10);
            if (*end || x < INT32_MIN || x > INT32_MAX) return bad(kname, "a template value");
            t->kind = kl == 3 ? MKK_TARG_INT : MKK_TARG_BOOL;
            if (t->kind == MKK_TARG_BOOL && x != 0 && x != 1) return bad(kname, "a template value");
            t->value = x;
        } else
            return bad(kname, "a template parameter");
        p = pc + 1;
        v = vc + 1;
    }
    return 0;
}

/* Splits the generated source G of kernel KN into what made it. */
static int parse_source(const char *kname, const char *g, int nin, mk_array *const *in, const bool (*shape_infos)[3],
                        int nout, parsed *out) {
    size_t glen = strlen(g), klen = strlen(kname);
    if (strncmp(kname, "custom_kernel_", 14) != 0) return bad(kname, "the kernel name");
    /* the signature line */
    char *sig = malloc(klen + 32);
    if (!sig) {
        mk_nomem();
        return -1;
    }
    snprintf(sig, klen + 32, "[[kernel]] void %s(\n", kname);
    const char *s = strstr(g, sig);
    size_t siglen = strlen(sig);
    free(sig);
    if (!s) return bad(kname, "no kernel signature in the source");
    /* the explicit instantiation at the end, when the kernel has template arguments */
    char *tail = malloc(2 * klen + 64);
    if (!tail) {
        mk_nomem();
        return -1;
    }
    snprintf(tail, 2 * klen + 64, "\n}\n\ntemplate [[host_name(\"%s\")]] [[kernel]] decltype(%s<", kname, kname);
    const char *t = find_last(g, glen, tail);
    size_t tlen = strlen(tail);
    free(tail);
    const char *body_end, *tvals = NULL;
    size_t ntvals = 0;
    if (t && t > s) {
        body_end = t;
        tvals = t + tlen;
        const char *close = strstr(tvals, ">) ");
        if (!close) return bad(kname, "the template instantiation");
        ntvals = (size_t)(close - tvals);
    } else {
        if (glen < 3 || strcmp(g + glen - 3, "\n}\n") != 0) return bad(kname, "the end of the source");
        body_end = g + glen - 3;
    }
    /* header, then "template <...>\n" when templated */
    const char *hend = s;
    if (tvals) {
        if (s - g < 2 || s[-1] != '\n' || s[-2] != '>') return bad(kname, "the template line");
        const char *tl = find_last(g, (size_t)(s - g), "template <");
        if (!tl || memchr(tl, '\n', (size_t)(s - 1 - tl))) return bad(kname, "the template line");
        if (parse_template(kname, tl + 10, (size_t)(s - 2 - (tl + 10)), tvals, ntvals, out) < 0) return -1;
        hend = tl;
    }
    if (!(out->header = dup_n(g, (size_t)(hend - g)))) return -1;
    /* the parameters, one per line, up to ") {\n" */
    const char *p = s + siglen, *pend = strstr(p, ") {\n");
    if (!pend || pend > body_end) return bad(kname, "the kernel signature");
    if (!(out->body = dup_n(pend + 4, (size_t)(body_end - (pend + 4))))) return -1;
    out->in_names = calloc((size_t)(nin ? nin : 1), sizeof *out->in_names);
    out->out_names = calloc((size_t)nout, sizeof *out->out_names);
    if (!out->in_names || !out->out_names) {
        mk_nomem();
        return -1;
    }
#define NEXT_LINE(l, n)                                                                                              \
    do {                                                                                                             \
        if (p >= pend) return bad(kname, "too few kernel parameters");                                              \
        const char *e_ = strstr(p, ",\n");                                                                           \
        if (!e_ || e_ > pend) e_ = pend;                                                                             \
        l = p;                                                                                                       \
        n = (size_t)(e_ - p);                                                                                        \
        p = e_ == pend ? pend : e_ + 2;                                                                              \
    } while (0)
    const char *line;
    size_t ln;
    for (int i = 0; i < nin; i++) {
        NEXT_LINE(line, ln);
        if (!(out->in_names[i] = param_name(line, ln))) return bad(kname, "an input parameter");
        if (in[i]->ndim > 0)
            for (int j = 0; j < 3; j++)
                if (shape_infos[i][j]) NEXT_LINE(line, ln);
    }
    for (int i = 0; i < nout; i++) {
        NEXT_LINE(line, ln);
        if (!(out->out_names[i] = param_name(line, ln))) return bad(kname, "an output parameter");
        static const char atomic[] = "  device atomic<";
        bool at = ln >= sizeof atomic - 1 && !memcmp(line, atomic, sizeof atomic - 1);
        if (i && at != out->atomic) return bad(kname, "the output parameters");
        out->atomic = at;
    }
#undef NEXT_LINE
    /* what follows are the Metal attributes, which the body fixes */
    return 0;
}

int mk_xkernel_build(const mk_xkernel_info *info, int nin, mk_array *const *in, int nout, const mk_outdesc *outd,
                     mk_array **outs) {
    const char *kname = info->name;
    parsed ps = {0};
    mkk_kernel *k = NULL;
    mkk_call *c = NULL;
    char *gen = NULL, *gname = NULL;
    int *ndims = NULL;
    int64_t(*shapes)[MK_MAX_NDIM] = NULL;
    int rc = -1;
    for (int i = 0; i < nout; i++) outs[i] = NULL;
    if (info->nin != nin) {
        bad(kname, "the shape infos do not match the inputs");
        goto done;
    }
    if (nout < 1) {
        bad(kname, "no outputs");
        goto done;
    }
    if (parse_source(kname, info->source, nin, in, (const bool(*)[3])info->shape_infos, nout, &ps) < 0) goto done;
    /* the user's name: the kernel name less its prefix and the suffix the
     * template arguments and types give (a kernel named "" has just that) */
    if (!(c = calloc(1, sizeof *c)) || !(c->output_dtypes = malloc(sizeof *c->output_dtypes * (size_t)nout))) {
        mk_nomem();
        goto done;
    }
    for (int i = 0; i < nout; i++) c->output_dtypes[i] = outd[i].dtype;
    for (int d = 0; d < 3; d++) {
        c->grid[d] = info->grid[d];
        c->threadgroup[d] = info->threadgroup[d];
    }
    c->has_init = info->has_init;
    c->init_value = info->init_value;
    c->ntemplate = ps.ntemplate;
    c->templ = ps.templ;
    ps.templ = NULL;
    ps.ntemplate = 0;
    const char *env = getenv("MKPY_ALLOW_NON_METAL");
    bool allow_non_metal = env && *env && strcmp(env, "0") != 0;
    c->allow_non_metal = allow_non_metal;
    c->check = mkk_check_requested();
    if (!(c->call_site = dup_n("an imported function", 21))) goto done;
    if (info->math_mode < 0 || info->math_mode > 2) {
        bad(kname, "the math mode");
        goto done;
    }
    k = mkk_kernel_new("", nin, (const char *const *)ps.in_names, nout, (const char *const *)ps.out_names, ps.body,
                       ps.header, info->ensure_row_contiguous, ps.atomic, (mkk_math_mode)info->math_mode, true);
    if (!k || mkk_generate(k, c, in, &gen, &gname) < 0) goto done;
    size_t suffix = strlen(gname) - 14, klen = strlen(kname);
    if (klen < 14 + suffix || strcmp(kname + klen - suffix, gname + 14) != 0) {
        bad(kname, "the kernel name does not match its template arguments and types");
        goto done;
    }
    char *user = dup_n(kname + 14, klen - 14 - suffix);
    if (!user) goto done;
    mkk_kernel_decref(k);
    free(gen);
    free(gname);
    gen = gname = NULL;
    k = mkk_kernel_new(user, nin, (const char *const *)ps.in_names, nout, (const char *const *)ps.out_names, ps.body,
                       ps.header, info->ensure_row_contiguous, ps.atomic, (mkk_math_mode)info->math_mode,
                       allow_non_metal);
    free(user);
    if (!k || mkk_generate(k, c, in, &gen, &gname) < 0) goto done;
    if (strcmp(gname, kname) != 0 || strcmp(gen, info->source) != 0) {
        bad(kname, "the source is not the one metal_kernel generates for these inputs");
        goto done;
    }
    for (int i = 0; i < nin; i++)
        for (int j = 0; j < 3; j++)
            if (k->shape_info[i][j] != info->shape_infos[i][j]) {
                bad(kname, "the shape infos do not match the source");
                goto done;
            }
    ndims = malloc(sizeof *ndims * (size_t)nout);
    shapes = malloc(sizeof *shapes * (size_t)nout);
    if (!ndims || !shapes) {
        mk_nomem();
        goto done;
    }
    for (int i = 0; i < nout; i++) {
        ndims[i] = outd[i].ndim;
        memcpy(shapes[i], outd[i].shape, sizeof(int64_t) * (size_t)outd[i].ndim);
    }
    mkk_call *owned = c;
    c = NULL;
    if (mkk_make_outputs(k, owned, in, ndims, (const int64_t(*)[MK_MAX_NDIM])shapes, outs) < 0) goto done;
    rc = 0;
done:
    if (rc < 0)
        for (int i = 0; i < nout; i++) mk_xdecref(outs[i]), outs[i] = NULL;
    if (k) mkk_kernel_decref(k);
    mkk_call_free(c);
    parsed_free(&ps, nin, nout);
    free(gen);
    free(gname);
    free(ndims);
    free(shapes);
    return rc;
}
