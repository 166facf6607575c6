/* Source generation: the Metal source MLX builds for a custom kernel, byte for
 * byte (header, template line, signature, body, explicit instantiation), and
 * the kernel name with its template hash and per-input/output type suffixes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "kernel.h"

const mkk_attr_info mkk_attrs[MKK_NATTRS] = {
    {"dispatch_quadgroups_per_threadgroup", "uint"},
    {"dispatch_simdgroups_per_threadgroup", "uint"},
    {"dispatch_threads_per_threadgroup", "uint3"},
    {"grid_origin", "uint3"},
    {"grid_size", "uint3"},
    {"quadgroup_index_in_threadgroup", "uint"},
    {"quadgroups_per_threadgroup", "uint"},
    {"simdgroup_index_in_threadgroup", "uint"},
    {"simdgroups_per_threadgroup", "uint"},
    {"thread_execution_width", "uint"},
    {"thread_index_in_quadgroup", "uint"},
    {"thread_index_in_simdgroup", "uint"},
    {"thread_index_in_threadgroup", "uint"},
    {"thread_position_in_grid", "uint3"},
    {"thread_position_in_threadgroup", "uint3"},
    {"threadgroup_position_in_grid", "uint3"},
    {"threadgroups_per_grid", "uint3"},
    {"threads_per_grid", "uint3"},
    {"threads_per_simdgroup", "uint"},
    {"threads_per_threadgroup", "uint3"},
};

/* ------------------------------------------------------- kernel objects */

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static bool contains_suffix(const char *source, const char *name, const char *suffix) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s%s", name, suffix);
    return strstr(source, buf) != NULL;
}

mkk_kernel *mkk_kernel_new(const char *name, int ninputs, const char *const *input_names, int noutputs,
                           const char *const *output_names, const char *source, const char *header,
                           bool ensure_row_contiguous, bool atomic_outputs, mkk_math_mode math_mode,
                           bool allow_non_metal) {
    if (noutputs == 0) {
        mk_error_set(MK_ERR_VALUE, "[metal_kernel] Must specify at least one output.");
        return NULL;
    }
    mkk_kernel *k = calloc(1, sizeof *k);
    if (!k) return mk_nomem();
    atomic_init(&k->refcnt, 1);
    pthread_mutex_init(&k->memo_mu, NULL);
    k->ninputs = ninputs;
    k->noutputs = noutputs;
    k->name = dupstr(name);
    k->source = dupstr(source);
    k->header = dupstr(header);
    k->input_names = calloc(ninputs ? ninputs : 1, sizeof(char *));
    k->output_names = calloc(noutputs, sizeof(char *));
    k->shape_info = calloc(ninputs ? ninputs : 1, sizeof *k->shape_info);
    if (!k->name || !k->source || !k->header || !k->input_names || !k->output_names || !k->shape_info)
        goto nomem;
    for (int i = 0; i < ninputs; i++) {
        if (!(k->input_names[i] = dupstr(input_names[i]))) goto nomem;
        k->shape_info[i][0] = contains_suffix(source, input_names[i], "_shape");
        k->shape_info[i][1] = contains_suffix(source, input_names[i], "_strides");
        k->shape_info[i][2] = contains_suffix(source, input_names[i], "_ndim");
    }
    for (int i = 0; i < noutputs; i++)
        if (!(k->output_names[i] = dupstr(output_names[i]))) goto nomem;
    for (int a = 0; a < MKK_NATTRS; a++) k->attr_used[a] = strstr(source, mkk_attrs[a].name) != NULL;
    k->ensure_row_contiguous = ensure_row_contiguous;
    k->atomic_outputs = atomic_outputs;
    k->math_mode = math_mode;
    k->allow_non_metal = allow_non_metal;
    k->prints = mkk_source_prints(k->source, k->header);
    if (!allow_non_metal) k->metal_error = mkk_metal_check(k->name, k->source, k->header);
    return k;
nomem:
    mkk_kernel_decref(k);
    return mk_nomem();
}

void mkk_kernel_incref(mkk_kernel *k) { atomic_fetch_add(&k->refcnt, 1); }

void mkk_kernel_decref(mkk_kernel *k) {
    if (atomic_fetch_sub(&k->refcnt, 1) != 1) return;
    for (int i = 0; i < k->ninputs && k->input_names; i++) free(k->input_names[i]);
    for (int i = 0; i < k->noutputs && k->output_names; i++) free(k->output_names[i]);
    free(k->input_names);
    free(k->output_names);
    free(k->shape_info);
    free(k->name);
    free(k->source);
    free(k->header);
    free(k->metal_error);
    for (int i = 0; i < MKK_MEMO_N; i++)
        if (k->memo[i]) mkk_memo_release(k->memo[i]);
    pthread_mutex_destroy(&k->memo_mu);
    free(k);
}

void mkk_memo_release(mkk_memo *m) {
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    free(m->generated);
    free(m->kname);
    free(m);
}

uint64_t mkk_hash64(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    uint64_t t = 0;
    memcpy(&t, s, n);
    h = (h ^ t) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 32);
}

void mkk_call_free(mkk_call *c) {
    if (!c) return;
    for (int i = 0; i < c->ntemplate; i++) free(c->templ[i].name);
    free(c->templ);
    free(c->output_dtypes);
    free(c->call_site);
    free(c);
}

/* ------------------------------------------------------- string builder */

typedef struct {
    char *s;
    size_t n, cap;
    bool failed;
} strbuf;

static void sb_add(strbuf *b, const char *text) {
    size_t len = strlen(text);
    if (b->failed) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + len + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, text, len + 1);
    b->n += len;
}

static void sb_fmt(strbuf *b, const char *fmt, ...) MK_PRINTF(2, 3);
static void sb_fmt(strbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(b, tmp);
}

static const char *type_string(mk_dtype t) { return mk_dtypes[t].msl_name; }

/* "<float, 4, 1>" as MLX's write_template */
static void write_template(strbuf *b, const mkk_call *c) {
    sb_add(b, "<");
    for (int i = 0; i < c->ntemplate; i++) {
        if (i) sb_add(b, ", ");
        const mkk_targ *t = &c->templ[i];
        if (t->kind == MKK_TARG_DTYPE)
            sb_add(b, type_string((mk_dtype)t->value));
        else
            sb_fmt(b, "%lld", (long long)t->value);
    }
    sb_add(b, ">");
}

int mkk_generate(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, char **source_out,
                 char **name_out) {
    if (k->cuda) return mkk_cuda_generate(k, c, inputs, source_out, name_out);
    strbuf name = {0}, src = {0}, tdef = {0};
    *source_out = *name_out = NULL;

    /* kernel name: custom_kernel_<name>[_<template hash>]_<in>[s|c]..._<out>... */
    sb_add(&name, "custom_kernel_");
    sb_add(&name, k->name);
    if (c->ntemplate) {
        write_template(&tdef, c);
        if (tdef.failed) goto nomem;
        /* '<', '>' and ", " become '_', then the last character is dropped */
        sb_add(&name, "_");
        for (const char *p = tdef.s; *p; p++) {
            if (*p == '<' || *p == '>')
                sb_add(&name, "_");
            else if (p[0] == ',' && p[1] == ' ') {
                sb_add(&name, "_");
                p++;
            } else {
                char ch[2] = {*p, 0};
                sb_add(&name, ch);
            }
        }
        if (!name.failed && name.n) name.s[--name.n] = 0;
    }
    for (int i = 0; i < k->ninputs; i++) {
        sb_add(&name, "_");
        sb_add(&name, type_string(inputs[i]->dtype));
        if (inputs[i]->ndim == 0)
            sb_add(&name, "s");
        else if (inputs[i]->size < MKK_MAX_CONSTANT_ARRAY_SIZE)
            sb_add(&name, "c");
    }
    for (int i = 0; i < k->noutputs; i++) {
        sb_add(&name, "_");
        sb_add(&name, type_string(c->output_dtypes[i]));
    }
    if (name.failed) goto nomem;

    /* the signature, as MLX's write_signature */
    sb_add(&src, k->header);
    if (c->ntemplate) {
        sb_add(&src, "template <");
        for (int i = 0; i < c->ntemplate; i++) {
            static const char *const kinds[] = {"typename", "int", "bool"};
            if (i) sb_add(&src, ", ");
            sb_add(&src, kinds[c->templ[i].kind]);
            sb_add(&src, " ");
            sb_add(&src, c->templ[i].name);
        }
        sb_add(&src, ">\n");
    }
    sb_add(&src, "[[kernel]] void ");
    sb_add(&src, name.s);
    sb_add(&src, "(\n");
    int index = 0, nattrs = 0;
    for (int a = 0; a < MKK_NATTRS; a++) nattrs += k->attr_used[a];
    for (int i = 0; i < k->ninputs; i++) {
        const mk_array *x = inputs[i];
        const char *nm = k->input_names[i];
        sb_fmt(&src, "  const %s %s%s %s [[buffer(%d)]],\n",
               x->size < MKK_MAX_CONSTANT_ARRAY_SIZE ? "constant" : "device", type_string(x->dtype),
               x->ndim == 0 ? "&" : "*", nm, index++);
        if (x->ndim > 0) {
            if (k->shape_info[i][0]) sb_fmt(&src, "  const constant int* %s_shape [[buffer(%d)]],\n", nm, index++);
            if (k->shape_info[i][1])
                sb_fmt(&src, "  const constant int64_t* %s_strides [[buffer(%d)]],\n", nm, index++);
            if (k->shape_info[i][2]) sb_fmt(&src, "  const constant int& %s_ndim [[buffer(%d)]],\n", nm, index++);
        }
    }
    for (int i = 0; i < k->noutputs; i++) {
        const char *ts = type_string(c->output_dtypes[i]);
        if (k->atomic_outputs)
            sb_fmt(&src, "  device atomic<%s>* %s [[buffer(%d)]]", ts, k->output_names[i], index);
        else
            sb_fmt(&src, "  device %s* %s [[buffer(%d)]]", ts, k->output_names[i], index);
        /* MLX compares the buffer index (which counts shape/stride buffers too)
         * with the number of inputs and outputs; kept as is */
        if (index < k->ninputs + k->noutputs - 1 || nattrs > 0)
            sb_add(&src, ",\n");
        else
            sb_add(&src, ") {\n");
        index++;
    }
    for (int a = 0, seen = 0; a < MKK_NATTRS; a++) {
        if (!k->attr_used[a]) continue;
        sb_fmt(&src, "  %s %s [[%s]]", mkk_attrs[a].type, mkk_attrs[a].name, mkk_attrs[a].name);
        sb_add(&src, ++seen < nattrs ? ",\n" : ") {\n");
    }
    sb_add(&src, k->source);
    sb_add(&src, "\n}\n");
    if (c->ntemplate) {
        /* template [[host_name("K")]] [[kernel]] decltype(K<...>) K<...>; */
        sb_add(&src, "\ntemplate [[host_name(\"");
        sb_add(&src, name.s);
        sb_add(&src, "\")]] [[kernel]] decltype(");
        sb_add(&src, name.s);
        sb_add(&src, tdef.s);
        sb_add(&src, ") ");
        sb_add(&src, name.s);
        sb_add(&src, tdef.s);
        sb_add(&src, ";\n");
    }
    if (src.failed) goto nomem;
    free(tdef.s);
    *source_out = src.s;
    *name_out = name.s;
    return 0;
nomem:
    free(name.s);
    free(src.s);
    free(tdef.s);
    mk_nomem();
    return -1;
}

static int count_lines(const char *s) {
    int n = 1;
    for (; *s; s++) n += *s == '\n';
    return n;
}

void mkk_line_map(const mkk_kernel *k, const char *generated, mkk_linemap *map) {
    /* the header comes first; the body starts right after the signature's
     * ") {\n", which ends the first line that ends with ") {" after it */
    size_t hlen = strlen(k->header);
    map->header_first = 1;
    map->header_lines = hlen ? count_lines(k->header) - (k->header[hlen - 1] == '\n') : 0;
    const char *body = strstr(generated + hlen, ") {\n");
    int line = 1;
    for (const char *p = generated; body && p < body + 4; p++) line += *p == '\n';
    map->source_first = line;
    map->source_lines = count_lines(k->source);
}

int mkk_count_barriers(const mkk_kernel *k) {
    int n = 0;
    const char *texts[2] = {k->source, k->header};
    for (int t = 0; t < 2; t++)
        for (const char *p = texts[t] ? strstr(texts[t], "threadgroup_barrier") : NULL; p;
             p = strstr(p + 1, "threadgroup_barrier"))
            n++;
    return n;
}
