/* Metal Shading Language -> C++ for mkpy_metal.h (CPU) or CUDA C++ for
 * mkpy_cuda.h (NVRTC): one pass, with a target.
 *
 * MSL is C++14 plus address spaces, attributes and a few literals, and the
 * runtime header supplies Metal's types and library. So the translation is a
 * token-level rewrite that keeps every newline where it was (compiler line
 * numbers then map straight back to the user's source):
 *   - `#include <metal_...>` lines become empty lines;
 *   - `[[...]]` attributes are removed ([[kernel]], [[buffer(0)]], [[host_name("k")]], ...);
 *   - the address spaces `device` and `thread` are removed (every buffer is
 *     ordinary memory on the CPU); `constant` becomes `const` (constant memory
 *     is read-only, and a program-scope `constant uint N = 4;` must stay a
 *     constant expression, usable as an array bound), or goes where `const`
 *     already precedes it (`const constant float* x`);
 *   - a `threadgroup` variable declared in a function body becomes
 *     `static thread_local` (the threads of one threadgroup run as fibers of
 *     one worker, so they share it, and other workers have their own), and a
 *     call recording its size follows the declaration on the same line;
 *     for CUDA it becomes `__shared__` (a threadgroup is a block), with no
 *     call; `threadgroup` as a pointer qualifier is removed (CUDA's generic
 *     addressing reaches shared memory through a plain pointer);
 *   - for CUDA, `constant` becomes `const` as for the CPU: NVRTC runs with
 *     -default-device, so a program-scope `const` scalar stays a constant
 *     expression and a `const` array or struct is __device__ data;
 *   - half literals `1.5h` become `half(1.5f)`, bfloat literals `1.5bf`
 *     `bfloat(1.5f)`, and unsuffixed floating literals get an `f` (they are
 *     float in Metal, double in C++).
 * Comments, strings and character literals pass through untouched. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

typedef struct {
    char *s;
    size_t n, cap;
} out_buf;

static int put(out_buf *o, const char *p, size_t len) {
    if (o->n + len + 1 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->n + len + 1) cap *= 2;
        char *s = realloc(o->s, cap);
        if (!s) return -1;
        o->s = s;
        o->cap = cap;
    }
    memcpy(o->s + o->n, p, len);
    o->n += len;
    o->s[o->n] = 0;
    return 0;
}

static int is_ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static int is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Address-space qualifiers with no meaning on the CPU. */
static int dropped_keyword(const char *p, size_t len) {
    static const char *const words[] = {"device", "thread"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strlen(words[i]) == len && memcmp(words[i], p, len) == 0) return 1;
    return 0;
}

/* At a `threadgroup` keyword that starts a statement: is it storage (an
 * array, scalar or struct declared there) rather than a pointer/reference
 * declaration? Fills the declared names (up to 16) and returns their count;
 * 0 for a pointer or reference declaration. Comments are skipped; with
 * `line_only` (a #define body) the declaration must end on this line. */
static int threadgroup_storage(const char *p, char names[][128], int line_only) {
    int n = 0, depth = 0, brackets = 0, in_init = 0, seen_bracket = 0;
    const char *last_ident = NULL;
    size_t last_len = 0;
    for (; *p && *p != ';'; p++) {
        char c = *p;
        if (c == '/' && p[1] == '/') {
            if (line_only) return 0;
            while (*p && *p != '\n') p++;
            if (!*p) break;
            continue;
        }
        if (c == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            if (!e) break;
            p = e + 1;
            continue;
        }
        if (c == '\n' && line_only && p[-1] != '\\') return 0;
        if (c == '[') {
            if (depth == 0) seen_bracket = 1;
            brackets++;
            depth++;
        } else if (c == ']') {
            brackets--;
            depth--;
        } else if (c == '(' || c == '{' || (c == '<' && !brackets)) {
            depth++;
        } else if (c == ')' || c == '}' || (c == '>' && !brackets)) {
            depth--;
        } else if (depth == 0 && (c == '*' || c == '&') && !in_init && !seen_bracket) {
            return 0;
        } else if (depth == 0 && c == '=') {
            in_init = 1;
        } else if (depth == 0 && c == ',') {
            if (last_ident && n < 16) snprintf(names[n++], 128, "%.*s", (int)last_len, last_ident);
            last_ident = NULL;
            in_init = seen_bracket = 0;
        } else if (depth == 0 && !in_init && !seen_bracket && is_ident_start(c)) {
            const char *e = p;
            while (is_ident(*e)) e++;
            last_ident = p;
            last_len = (size_t)(e - p);
            p = e - 1;
        }
    }
    if (*p != ';') return 0; /* no end to the declaration */
    if (last_ident && n < 16) snprintf(names[n++], 128, "%.*s", (int)last_len, last_ident);
    return n;
}

/* The last two significant characters emitted are `::` (a qualified name follows). */
static int after_scope(const out_buf *o) {
    size_t n = o->n;
    while (n > 0 && (o->s[n - 1] == ' ' || o->s[n - 1] == '\t')) n--;
    return n >= 2 && o->s[n - 1] == ':' && o->s[n - 2] == ':';
}

/* The next character after blanks and newlines (0 at the end). */
static const char *skip_blank(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

char *mkk_translate(const char *src, mkk_target target, mkk_sites *sites) {
    out_buf o = {0};
    if (sites) memset(sites, 0, sizeof *sites);
    const char *p = src;
    int line_start = 1;
    int braces = 0, parens = 0;
    char last = ';'; /* last significant character emitted, outside preprocessor lines */
    char saved_last = 0; /* `last` before the preprocessor line being copied (0: none) */
    int in_define = 0;   /* in a #define line: a threadgroup declaration there is storage */
    int last_was_const = 0; /* the last identifier was `const` (comments and spaces aside) */
    char tg_names[16][128];
    int tg_count = 0, tg_depth = -1;
    if (put(&o, "", 0) < 0) goto nomem;
    while (*p) {
        char c = *p;
        if (line_start) {
            /* a preprocessor line including a Metal header */
            const char *q = p;
            while (*q == ' ' || *q == '\t') q++;
            if (*q == '#') {
                /* a directive is not a statement: a declaration after it starts
                 * a statement as if the line were not there */
                saved_last = last;
                const char *r = q + 1;
                while (*r == ' ' || *r == '\t') r++;
                in_define = strncmp(r, "define", 6) == 0 && !is_ident(r[6]);
                if (strncmp(r, "include", 7) == 0) {
                    r += 7;
                    while (*r == ' ' || *r == '\t') r++;
                    if (strncmp(r, "<metal_", 7) == 0) {
                        while (*p && *p != '\n') p++;
                        saved_last = 0;
                        continue;
                    }
                }
            }
        }
        line_start = 0;
        if (c == '\n') {
            line_start = 1;
            if (saved_last && !(o.n >= 1 && o.s[o.n - 1] == '\\')) { /* end of a directive (not continued) */
                last = saved_last;
                saved_last = 0;
                in_define = 0;
            }
            if (put(&o, p++, 1) < 0) goto nomem;
            continue; /* white space and comments leave `last` as it was */
        } else if (c == '/' && p[1] == '/') {
            const char *e = p;
            while (*e && *e != '\n') e++;
            if (put(&o, p, e - p) < 0) goto nomem;
            p = e;
            continue;
        } else if (c == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            e = e ? e + 2 : p + strlen(p);
            if (put(&o, p, e - p) < 0) goto nomem;
            p = e;
            continue;
        } else if (c == '"' || c == '\'') {
            const char *e = p + 1;
            while (*e && *e != c && *e != '\n') e += (*e == '\\' && e[1]) ? 2 : 1;
            if (*e == c) e++;
            if (put(&o, p, e - p) < 0) goto nomem;
            p = e;
        } else if (c == '[' && p[1] == '[') {
            /* attribute: drop up to the matching "]]", keeping newlines */
            const char *e = p + 2;
            int depth = 0;
            while (*e && !(depth == 0 && e[0] == ']' && e[1] == ']')) {
                if (*e == '[') depth++;
                if (*e == ']') depth--;
                if (*e == '\n' && put(&o, "\n", 1) < 0) goto nomem;
                e++;
            }
            p = *e ? e + 2 : e;
            if (put(&o, " ", 1) < 0) goto nomem;
            continue;
        } else if (is_ident_start(c)) {
            const char *e = p;
            while (is_ident(*e)) e++;
            if (e - p == 11 && memcmp(p, "threadgroup", 11) == 0) {
                int n = 0;
                if (in_define)
                    n = threadgroup_storage(e, tg_names, 1);
                else if (braces > 0 && parens == 0 && (last == ';' || last == '{' || last == '}'))
                    n = threadgroup_storage(e, tg_names, 0);
                if (n > 0 && target == MKK_TARGET_CUDA) {
                    if (put(&o, "__shared__", 10) < 0) goto nomem;
                    if (sites) {
                        int *grown = realloc(sites->tg_offset, (size_t)(sites->ntg + 1) * sizeof *grown);
                        if (!grown) goto nomem;
                        grown[sites->ntg++] = (int)(p - src);
                        sites->tg_offset = grown;
                    }
                } else if (n > 0) {
                    tg_count = n;
                    tg_depth = braces;
                    if (put(&o, "static thread_local", 19) < 0) goto nomem;
                }
            } else if (target == MKK_TARGET_CUDA && e - p == 19 && memcmp(p, "threadgroup_barrier", 19) == 0 &&
                       *skip_blank(e) == '(') {
                /* a barrier, numbered for the divergence check (mkpy_cuda.h) */
                char call[96];
                const int id = sites ? sites->n : 0;
                snprintf(call, sizeof call, "%sthreadgroup_barrier_at(%du)", after_scope(&o) ? "" : "::metal::", id);
                if (put(&o, call, strlen(call)) < 0) goto nomem;
                if (sites) {
                    int *grown = realloc(sites->offset, (size_t)(sites->n + 1) * sizeof *grown);
                    if (!grown) goto nomem;
                    grown[sites->n++] = (int)(p - src);
                    sites->offset = grown;
                }
            } else if (e - p == 8 && memcmp(p, "constant", 8) == 0) {
                if (!last_was_const && put(&o, "const", 5) < 0) goto nomem;
            } else if (!dropped_keyword(p, e - p) && put(&o, p, e - p) < 0) {
                goto nomem;
            }
            last_was_const = e - p == 5 && memcmp(p, "const", 5) == 0;
            p = e;
            last = 'a';
            continue;
        } else if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)p[1]))) {
            /* a number; a trailing h/H makes it a half literal */
            const char *e = p;
            while (is_ident(*e) || *e == '.' ||
                   ((*e == '+' || *e == '-') && (e[-1] == 'e' || e[-1] == 'E') && !(p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))))
                e++;
            size_t len = e - p;
            int hex = len > 1 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
            int floating = !hex && (memchr(p, '.', len) || memchr(p, 'e', len) || memchr(p, 'E', len));
            if (!hex && (e[-1] == 'h' || e[-1] == 'H')) {
                /* 1.5h -> half(1.5f) */
                if (put(&o, "half(", 5) < 0 || put(&o, p, len - 1) < 0) goto nomem;
                if (put(&o, floating ? "f)" : ")", floating ? 2 : 1) < 0) goto nomem;
            } else if (!hex && len > 2 && e[-2] == 'b' && e[-1] == 'f') {
                /* 1.5bf -> bfloat(1.5f) */
                if (put(&o, "bfloat(", 7) < 0 || put(&o, p, len - 2) < 0) goto nomem;
                if (put(&o, floating ? "f)" : ")", floating ? 2 : 1) < 0) goto nomem;
            } else {
                if (put(&o, p, len) < 0) goto nomem;
                /* an unsuffixed floating literal is a float in Metal, a double in C++ */
                char last_ch = e[-1];
                if (floating && (isdigit((unsigned char)last_ch) || last_ch == '.') && put(&o, "f", 1) < 0)
                    goto nomem;
            }
            p = e;
        } else {
            if (c == '{') braces++;
            if (c == '}') braces--;
            if (c == '(') parens++;
            if (c == ')') parens--;
            if (put(&o, p++, 1) < 0) goto nomem;
            if (c == ';' && tg_count && braces == tg_depth && parens == 0) {
                for (int i = 0; i < tg_count; i++) {
                    char call[400];
                    snprintf(call, sizeof call, " ::mkpy::threadgroup_alloc(&%s, sizeof(%s));", tg_names[i],
                             tg_names[i]);
                    if (put(&o, call, strlen(call)) < 0) goto nomem;
                }
                tg_count = 0;
            }
            if (c != ' ' && c != '\t' && c != '\r') last = c;
            continue;
        }
        last = 'a';
    }
    return o.s;
nomem:
    free(o.s);
    if (sites) {
        free(sites->offset);
        free(sites->tg_offset);
        memset(sites, 0, sizeof *sites);
    }
    return mk_nomem();
}
