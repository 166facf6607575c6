/* What every back-end's program shares: the translated kernel with #line
 * markers that put diagnostics at the user's header and source lines, and
 * the call of the kernel function from one thread's attributes. The CPU
 * (backend/cpu/jit.c) and CUDA (backend/cuda/program.c) builders add their
 * own includes and entry points around these. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/kernel.h"

void mkk_sb(mkk_sbuf *b, const char *t) {
    size_t len = strlen(t);
    if (b->failed) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->n + len + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            free(b->s);
            b->s = NULL;
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, len + 1);
    b->n += len;
}

void mkk_sbf(mkk_sbuf *b, const char *fmt, ...) {
    char tmp[2048];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (len < (int)sizeof tmp) {
        mkk_sb(b, tmp);
        return;
    }
    char *big = malloc((size_t)len + 1);
    if (!big) {
        free(b->s);
        b->s = NULL;
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)len + 1, fmt, ap);
    va_end(ap);
    mkk_sb(b, big);
    free(big);
}

/* Appends lines [first, first + count) (1-based) of text. */
static void sb_lines(mkk_sbuf *b, const char *text, int first, int count) {
    int line = 1;
    const char *p = text;
    while (*p && line < first) line += *p++ == '\n';
    const char *start = p;
    while (*p && line < first + count) line += *p++ == '\n';
    size_t len = (size_t)(p - start);
    char *tmp = malloc(len + 2);
    if (!tmp) {
        free(b->s);
        b->s = NULL;
        b->failed = true;
        return;
    }
    memcpy(tmp, start, len);
    tmp[len] = 0;
    if (len && tmp[len - 1] != '\n') strcat(tmp, "\n");
    mkk_sb(b, tmp);
    free(tmp);
}

static int total_lines(const char *s) {
    int n = 1;
    for (; *s; s++) n += *s == '\n';
    return n;
}

int mkk_program_body(mkk_sbuf *b, const mkk_kernel *k, const char *generated, mkk_target target,
                     const char *header_file, const char *generated_file, const char *source_file, int *nbarriers,
                     int *simt) {
    mkk_sites sites;
    char *cpp = mkk_translate(generated, target, &sites);
    if (!cpp) return -1;
    if (nbarriers) *nbarriers = sites.n;
    free(sites.offset);
    free(sites.tg_offset);
    if (simt) *simt = 0;
    if (target == MKK_TARGET_CUDA) {
        char *tracked = NULL;
        const int r = mkk_simt_rewrite(cpp, &tracked);
        if (r < 0) {
            free(cpp);
            return -1;
        }
        if (r > 0) {
            free(cpp);
            cpp = tracked;
            if (simt) *simt = 1;
        }
    }
    mkk_linemap m;
    mkk_line_map(k, generated, &m);
    int n = total_lines(cpp);
    if (m.header_lines > 0) {
        mkk_sbf(b, "#line 1 \"%s\"\n", header_file);
        sb_lines(b, cpp, 1, m.header_lines);
    }
    mkk_sbf(b, "#line %d \"%s\"\n", m.header_lines + 1, generated_file);
    sb_lines(b, cpp, m.header_lines + 1, m.source_first - m.header_lines - 1);
    mkk_sbf(b, "#line 1 \"%s\"\n", source_file);
    sb_lines(b, cpp, m.source_first, m.source_lines);
    mkk_sbf(b, "#line %d \"%s\"\n", m.source_first + m.source_lines, generated_file);
    sb_lines(b, cpp, m.source_first + m.source_lines, n - (m.source_first + m.source_lines) + 1);
    free(cpp);
    if (b->failed) {
        mk_nomem();
        return -1;
    }
    return 0;
}

/* The user's file, line and column of byte offset `off` of the generated text. */
static void locate(const mkk_kernel *k, const char *generated, int off, char *file, size_t fn, int *line, int *col) {
    int l = 1;
    const char *start = generated;
    for (const char *q = generated; q < generated + off; q++)
        if (*q == '\n') {
            l++;
            start = q + 1;
        }
    *col = (int)(generated + off - start) + 1;
    mkk_linemap m;
    mkk_line_map(k, generated, &m);
    if (m.header_lines > 0 && l <= m.header_lines) {
        snprintf(file, fn, "<kernel %s header>", k->name);
        *line = l;
    } else if (l >= m.source_first && l < m.source_first + m.source_lines) {
        snprintf(file, fn, "<kernel %s source>", k->name);
        *line = l - m.source_first + 1;
    } else {
        snprintf(file, fn, "<kernel %s signature>", k->name);
        *line = l;
    }
}

static int cuda_sites(const char *generated, mkk_sites *sites) {
    char *cpp = mkk_translate(generated, MKK_TARGET_CUDA, sites);
    if (!cpp) {
        mk_error_clear();
        return -1;
    }
    free(cpp);
    return 0;
}

int mkk_cuda_simt(const char *generated) {
    char *cpp = mkk_translate(generated, MKK_TARGET_CUDA, NULL), *tracked = NULL;
    const int r = cpp ? mkk_simt_rewrite(cpp, &tracked) : -1;
    free(cpp);
    free(tracked);
    if (r < 0) mk_error_clear();
    return r;
}

int mkk_barrier_site(const mkk_kernel *k, const char *generated, int i, char *file, size_t fn, int *line, int *col) {
    mkk_sites sites;
    if (cuda_sites(generated, &sites) < 0) return -1;
    const int ok = i >= 0 && i < sites.n;
    if (ok) locate(k, generated, sites.offset[i], file, fn, line, col);
    free(sites.offset);
    free(sites.tg_offset);
    return ok ? 0 : -1;
}

void mkk_threadgroup_sites(const mkk_kernel *k, const char *generated, char *out, size_t n) {
    mkk_sites sites;
    out[0] = 0;
    if (cuda_sites(generated, &sites) < 0) return;
    size_t used = 0;
    for (int i = 0; i < sites.ntg && used + 1 < n; i++) {
        char file[600];
        int line, col;
        locate(k, generated, sites.tg_offset[i], file, sizeof file, &line, &col);
        int w = snprintf(out + used, n - used, "%s%s:%d", i ? ", " : "", file, line);
        if (w < 0) break;
        used += (size_t)w < n - used ? (size_t)w : n - used - 1;
    }
    free(sites.offset);
    free(sites.tg_offset);
}

char *mkk_call_expr(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *kernel_name,
                    const char *arg_fmt, int *readonly_args) {
    mkk_sbuf call = {0};
    mkk_sb(&call, kernel_name);
    if (c->ntemplate) {
        mkk_sb(&call, "<");
        for (int i = 0; i < c->ntemplate; i++) {
            const mkk_targ *t = &c->templ[i];
            if (t->kind == MKK_TARG_DTYPE)
                mkk_sbf(&call, "%s%s", i ? ", " : "", mk_dtypes[t->value].msl_name);
            else
                mkk_sbf(&call, "%s%lld", i ? ", " : "", (long long)t->value);
        }
        mkk_sb(&call, ">");
    }
    mkk_sb(&call, "(");
    int arg = 0, first = 1;
    char a[64];
#define SEP() (first ? (first = 0, "") : ", ")
#define ARG() (snprintf(a, sizeof a, arg_fmt, arg++), a)
    for (int i = 0; i < k->ninputs; i++) {
        const char *ts = mk_dtypes[inputs[i]->dtype].msl_name;
        if (inputs[i]->ndim == 0)
            mkk_sbf(&call, "%s*(const %s *)%s", SEP(), ts, ARG());
        else
            mkk_sbf(&call, "%s(const %s *)%s", SEP(), ts, ARG());
        if (inputs[i]->ndim > 0) {
            if (k->shape_info[i][0]) mkk_sbf(&call, "%s(const int *)%s", SEP(), ARG());
            if (k->shape_info[i][1]) mkk_sbf(&call, "%s(const int64_t *)%s", SEP(), ARG());
            if (k->shape_info[i][2]) mkk_sbf(&call, "%s*(const int *)%s", SEP(), ARG());
        }
    }
    if (readonly_args) *readonly_args = arg; /* inputs and their shapes: nothing writes them during a launch */
    for (int i = 0; i < k->noutputs; i++) {
        const char *ts = mk_dtypes[c->output_dtypes[i]].msl_name;
        if (k->atomic_outputs)
            mkk_sbf(&call, "%s(metal::atomic<%s> *)%s", SEP(), ts, ARG());
        else
            mkk_sbf(&call, "%s(%s *)%s", SEP(), ts, ARG());
    }
    for (int i = 0; i < MKK_NATTRS; i++)
        if (k->attr_used[i])
            mkk_sbf(&call, strcmp(mkk_attrs[i].type, "uint3") == 0 ? "%smkpy::u3(t.%s)" : "%st.%s", SEP(),
                    mkk_attrs[i].name);
#undef SEP
#undef ARG
    mkk_sb(&call, ");\n");
    if (call.failed) return mk_nomem();
    return call.s;
}

int mkk_nargs(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs) {
    (void)c;
    int n = k->noutputs;
    for (int i = 0; i < k->ninputs; i++) {
        n++;
        if (inputs[i]->ndim > 0) n += k->shape_info[i][0] + k->shape_info[i][1] + k->shape_info[i][2];
    }
    return n;
}
