/* What Metal's compiler rejects, found before clang (which would accept it)
 * runs: so that a kernel that works here also compiles on a Mac.
 *
 * The user's source and header are tokenized (comments, string and character
 * literals skipped; preprocessor lines apart) and scanned:
 *   - keywords: double (and long double), goto, virtual, throw/try/catch,
 *     new and delete (`= delete` is fine);
 *   - calls of malloc, calloc, realloc, free and printf;
 *   - `(*name)(` and `(*)(`: function pointers;
 *   - #include of anything but Metal's own headers (<metal_...>);
 *   - the parameters of every function defined in the header: a pointer
 *     needs an address space (device, constant, threadgroup, thread, ...);
 *   - program-scope variables: at namespace scope only `constant` (or
 *     constexpr) variables exist in Metal;
 *   - recursion: the calls between the functions the header defines (by
 *     name; overloaded names are left out, as a call cannot be told apart).
 * The first finding is returned as "<kernel k source>:line:col: message", at
 * the user's own line. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

typedef struct {
    const char *p;
    int len, line, col;
    char kind; /* 'i' identifier, 'n' number, 's' string/char literal, 'p' punctuation */
    char pp;   /* on a preprocessor line */
} tok;

typedef struct {
    tok *t;
    int n, cap;
} toks;

static int push(toks *v, tok t) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 256;
        tok *n = realloc(v->t, (size_t)cap * sizeof *n);
        if (!n) return -1;
        v->t = n;
        v->cap = cap;
    }
    v->t[v->n++] = t;
    return 0;
}

typedef struct {
    const char *file; /* "<kernel k source>" */
    char *msg;        /* first finding */
} finding;

static void report(finding *f, const tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(finding *f, const tok *t, const char *fmt, ...) {
    if (f->msg) return;
    char text[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t n = strlen(f->file) + strlen(text) + 40;
    f->msg = malloc(n);
    if (f->msg) snprintf(f->msg, n, "%s:%d:%d: %s", f->file, t->line, t->col, text);
}

static int is_id0(char c) { return isalpha((unsigned char)c) || c == '_'; }
static int is_id(char c) { return isalnum((unsigned char)c) || c == '_'; }

static int eq(const tok *t, const char *w) {
    return t && (int)strlen(w) == t->len && memcmp(t->p, w, (size_t)t->len) == 0;
}

/* Tokens of text; #include lines are checked here. -1 on out-of-memory. */
static int tokenize(const char *s, toks *v, finding *f) {
    int line = 1, col = 1, pp = 0, line_start = 1;
    const char *p = s;
#define ADV(n)                                    \
    do {                                          \
        for (int k_ = 0; k_ < (n) && *p; k_++) {  \
            if (*p == '\n') {                     \
                line++;                           \
                col = 1;                          \
            } else {                              \
                col++;                            \
            }                                     \
            p++;                                  \
        }                                         \
    } while (0)
    while (*p) {
        char c = *p;
        if (c == '\n') {
            if (!(pp && p > s && p[-1] == '\\')) pp = 0;
            line_start = 1;
            ADV(1);
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            ADV(1);
            continue;
        }
        if (c == '/' && p[1] == '/') {
            while (*p && *p != '\n') ADV(1);
            continue;
        }
        if (c == '/' && p[1] == '*') {
            ADV(2);
            while (*p && !(p[0] == '*' && p[1] == '/')) ADV(1);
            ADV(2);
            continue;
        }
        if (line_start && c == '#') {
            pp = 1;
            line_start = 0;
            tok hash = {p, 1, line, col, 'p', 1};
            ADV(1);
            while (*p == ' ' || *p == '\t') ADV(1);
            if (strncmp(p, "include", 7) == 0 && !is_id(p[7])) {
                ADV(7);
                while (*p == ' ' || *p == '\t') ADV(1);
                /* the header name: <...> or "...", else the rest of the line (a macro) */
                const char *e = p;
                char close = *p == '<' ? '>' : *p == '"' ? '"' : 0;
                if (close) {
                    e++;
                    while (*e && *e != close && *e != '\n') e++;
                    if (*e == close) e++;
                } else {
                    while (*e && *e != '\n' && *e != '\r' && !(e[0] == '/' && (e[1] == '/' || e[1] == '*'))) e++;
                }
                int len = (int)(e - p);
                while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
                if (!(len > 7 && strncmp(p, "<metal_", 7) == 0 && p[len - 1] == '>'))
                    report(f, &hash,
                           "Metal does not support `#include %.*s`: only Metal's own headers (<metal_stdlib>, "
                           "<metal_simdgroup>, ...) can be included; C and C++ headers do not exist there",
                           len > 200 ? 200 : len, p);
            }
            continue;
        }
        line_start = 0;
        tok t = {p, 0, line, col, 'p', (char)pp};
        if (c == '"' || c == '\'') {
            const char *e = p + 1;
            while (*e && *e != c && *e != '\n') e += (*e == '\\' && e[1]) ? 2 : 1;
            if (*e == c) e++;
            t.kind = 's';
            t.len = (int)(e - p);
        } else if (is_id0(c)) {
            const char *e = p;
            while (is_id(*e)) e++;
            t.kind = 'i';
            t.len = (int)(e - p);
        } else if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)p[1]))) {
            const char *e = p;
            while (is_id(*e) || *e == '.' || ((*e == '+' || *e == '-') && (e[-1] == 'e' || e[-1] == 'E'))) e++;
            t.kind = 'n';
            t.len = (int)(e - p);
        } else if ((c == ':' && p[1] == ':') || (c == '-' && p[1] == '>')) {
            t.len = 2;
        } else {
            t.len = 1;
        }
        if (push(v, t) < 0) return -1;
        ADV(t.len);
    }
#undef ADV
    return 0;
}

/* Keywords and calls Metal has no place for. */
static void check_words(const toks *v, finding *f) {
    for (int i = 0; i < v->n && !f->msg; i++) {
        const tok *t = &v->t[i];
        const tok *prev = i ? &v->t[i - 1] : NULL, *next = i + 1 < v->n ? &v->t[i + 1] : NULL;
        if (t->kind == 'i') {
            int member = prev && (eq(prev, ".") || eq(prev, "->") || eq(prev, "::"));
            if (eq(t, "double"))
                report(f, t, "Metal does not support `%s` (64-bit floating point): use float",
                       prev && eq(prev, "long") ? "long double" : "double");
            else if (eq(t, "goto"))
                report(f, t, "Metal does not support `goto`");
            else if (eq(t, "virtual"))
                report(f, t, "Metal does not support virtual functions");
            else if (eq(t, "throw") || eq(t, "try") || eq(t, "catch"))
                report(f, t, "Metal does not support exceptions (`%.*s`)", t->len, t->p);
            else if (eq(t, "new"))
                report(f, t, "Metal does not support `new` (no dynamic memory allocation)");
            else if (eq(t, "delete") && !(prev && eq(prev, "=")))
                report(f, t, "Metal does not support `delete` (no dynamic memory allocation)");
            else if (!member && next && eq(next, "(") &&
                     (eq(t, "malloc") || eq(t, "calloc") || eq(t, "realloc") || eq(t, "free")))
                report(f, t, "Metal does not support `%.*s` (no dynamic memory allocation)", t->len, t->p);
            else if (!member && next && eq(next, "(") && (eq(t, "printf") || eq(t, "fprintf") || eq(t, "puts")))
                report(f, t, "Metal does not support `%.*s` in kernels", t->len, t->p);
        } else if (eq(t, "(") && next && eq(next, "*") && !t->pp) {
            /* (*name)( or (*)( : a function pointer */
            int j = i + 2;
            if (j < v->n && v->t[j].kind == 'i') j++;
            if (j + 1 < v->n && eq(&v->t[j], ")") && eq(&v->t[j + 1], "("))
                report(f, t, "Metal does not support function pointers");
        }
    }
}

static const char *const address_spaces[] = {"device", "constant", "threadgroup", "thread", "threadgroup_imageblock",
                                              "ray_data", "object_data"};

static int is_address_space(const tok *t) {
    for (size_t i = 0; i < sizeof address_spaces / sizeof *address_spaces; i++)
        if (eq(t, address_spaces[i])) return 1;
    return 0;
}

/* The parameters (tokens lo..hi-1) of a function definition: a pointer at
 * the top level of a parameter needs an address space. */
static void check_params(const toks *v, int lo, int hi, finding *f) {
    int start = lo, depth = 0;
    for (int i = lo; i <= hi && !f->msg; i++) {
        const tok *t = i < hi ? &v->t[i] : NULL;
        if (t && (eq(t, "(") || eq(t, "<") || eq(t, "[") || eq(t, "{"))) depth++;
        else if (t && (eq(t, ")") || eq(t, ">") || eq(t, "]") || eq(t, "}"))) depth--;
        if (t && !(depth == 0 && eq(t, ","))) continue;
        /* one parameter: start..i-1 */
        int has_space = 0, star = -1, d = 0;
        for (int j = start; j < i; j++) {
            const tok *u = &v->t[j];
            if (eq(u, "(") || eq(u, "<") || eq(u, "[")) d++;
            else if (eq(u, ")") || eq(u, ">") || eq(u, "]")) d--;
            else if (eq(u, "=")) break; /* default value */
            else if (d == 0 && eq(u, "*") && star < 0) star = j;
            else if (is_address_space(u)) has_space = 1;
        }
        if (star >= 0 && !has_space)
            report(f, &v->t[star],
                   "Metal does not support pointers without an address space: write `device`, `constant`, "
                   "`threadgroup` or `thread` before the pointer's type");
        start = i + 1;
    }
}

typedef struct {
    const tok *name;
    int body_lo, body_hi; /* token range of the body */
    int ndefs;            /* definitions of this name */
} func;

/* Walks the structure of the header (braces by kind): function definitions
 * (parameters checked, recorded for the recursion check) and program-scope
 * variables. */
enum { B_NAMESPACE, B_TYPE, B_FUNC, B_INIT };

static int check_structure(const toks *v, finding *f, func **funcs_out, int *nfuncs_out) {
    int kinds[256], depth = 0; /* the kinds of the open braces (capped) */
    int in_func = 0;           /* braces open inside a function body (or initializer) */
    func *funcs = NULL;
    int nfuncs = 0, fcap = 0;
    int stmt = -1; /* first token of the statement at namespace/type scope */
    int paren = 0, params_lo = -1, params_hi = -1, name_tok = -1;
    int has_eq = 0, has_fparen = 0, has_storage_ok = 0, has_type_kw = 0, has_skip_kw = 0;
    int func_open = -1, func_lo = 0; /* brace depth where the function body opened */
    for (int i = 0; i < v->n && !f->msg; i++) {
        const tok *t = &v->t[i];
        if (t->pp) continue;
        if (in_func) {
            if (eq(t, "{")) {
                in_func++;
            } else if (eq(t, "}")) {
                if (--in_func == 0) {
                    if (func_open >= 0 && name_tok >= 0) {
                        if (nfuncs == fcap) {
                            fcap = fcap ? fcap * 2 : 32;
                            func *nf = realloc(funcs, (size_t)fcap * sizeof *nf);
                            if (!nf) {
                                free(funcs);
                                return -1;
                            }
                            funcs = nf;
                        }
                        funcs[nfuncs++] = (func){&v->t[name_tok], func_lo, i, 1};
                    }
                    func_open = -1;
                    /* a function definition ends its statement; an initializer does not */
                    if (kinds[depth < 256 ? depth : 255] == B_FUNC) {
                        stmt = -1;
                        paren = 0;
                        params_lo = params_hi = name_tok = -1;
                        has_eq = has_fparen = has_storage_ok = has_type_kw = has_skip_kw = 0;
                    }
                }
            }
            continue;
        }
        int at_type = depth > 0 && kinds[(depth - 1) < 256 ? depth - 1 : 255] == B_TYPE;
        if (stmt < 0) {
            if (eq(t, ";")) continue;
            stmt = i;
        }
        if (t->kind == 'i') {
            if (eq(t, "constant") || eq(t, "constexpr") || eq(t, "extern")) has_storage_ok = 1;
            if (eq(t, "struct") || eq(t, "class") || eq(t, "union") || eq(t, "enum") || eq(t, "namespace"))
                has_type_kw = eq(t, "namespace") ? 2 : 1;
            if (eq(t, "typedef") || eq(t, "using") || eq(t, "template") || eq(t, "static_assert") ||
                eq(t, "friend") || eq(t, "operator"))
                has_skip_kw = 1;
        }
        if (eq(t, "(")) {
            if (paren == 0 && !has_eq && params_lo < 0) {
                has_fparen = 1;
                params_lo = i + 1;
                name_tok = i > 0 && v->t[i - 1].kind == 'i' ? i - 1 : -1;
            }
            paren++;
        } else if (eq(t, ")")) {
            if (--paren == 0 && params_lo >= 0 && params_hi < 0) params_hi = i;
        } else if (eq(t, "=") && paren == 0) {
            has_eq = 1;
        } else if (eq(t, "{")) {
            int kind;
            if (has_type_kw == 2)
                kind = B_NAMESPACE;
            else if (has_fparen && !has_eq && params_hi >= 0)
                kind = B_FUNC;
            else if (has_type_kw == 1 && !has_eq)
                kind = B_TYPE;
            else
                kind = B_INIT;
            if (kind == B_FUNC) {
                if (params_lo >= 0 && params_hi >= params_lo) check_params(v, params_lo, params_hi, f);
                func_open = depth;
                func_lo = i + 1;
            }
            if (kind == B_FUNC || kind == B_INIT) {
                kinds[depth < 256 ? depth : 255] = kind;
                in_func = 1;
                continue;
            }
            if (depth < 256) kinds[depth] = kind;
            depth++;
            stmt = -1;
            paren = 0;
            params_lo = params_hi = name_tok = -1;
            has_eq = has_fparen = has_storage_ok = has_type_kw = has_skip_kw = 0;
            continue;
        } else if (eq(t, "}")) {
            if (depth > 0) depth--;
            /* `struct S {...} s;` continues its statement: keep going as a new one */
            stmt = -1;
            paren = 0;
            params_lo = params_hi = name_tok = -1;
            has_eq = has_fparen = has_storage_ok = has_type_kw = has_skip_kw = 0;
            continue;
        } else if (eq(t, ";") && paren == 0) {
            /* a declaration at namespace scope: a variable unless it declares
             * a function, a type or an alias, or lives in `constant` */
            int is_var = !at_type && !has_storage_ok && !has_skip_kw && !has_type_kw &&
                         !(has_fparen && !has_eq) && i > stmt + 1;
            if (is_var) {
                /* a label such as `public:` never reaches here (types skipped) */
                report(f, &v->t[stmt], "program scope variable must reside in constant address space");
            }
            stmt = -1;
            params_lo = params_hi = name_tok = -1;
            has_eq = has_fparen = has_storage_ok = has_type_kw = has_skip_kw = 0;
        }
    }
    *funcs_out = funcs;
    *nfuncs_out = nfuncs;
    return 0;
}

/* Recursion among the header's functions (overloaded names aside). The
 * search is quadratic in the number of functions: headers of more than
 * MAX_FUNCS functions (machine-made, not hand-written kernels) are not
 * searched. */
#define MAX_FUNCS 512
static void check_recursion(const toks *v, func *fs, int n, finding *f) {
    if (n > MAX_FUNCS) return;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (a != b && fs[a].name->len == fs[b].name->len &&
                memcmp(fs[a].name->p, fs[b].name->p, (size_t)fs[a].name->len) == 0)
                fs[a].ndefs++;
    /* adjacency: calls[a][b] when a's body calls b by name */
    unsigned char *calls = calloc((size_t)n * (size_t)(n ? n : 1), 1);
    int *state = calloc((size_t)(n ? n : 1), sizeof *state), *stack = calloc((size_t)(n ? n : 1), sizeof *stack),
        *iter = calloc((size_t)(n ? n : 1), sizeof *iter);
    if (!calls || !state || !stack || !iter) goto out;
    for (int a = 0; a < n; a++) {
        if (fs[a].ndefs > 1) continue;
        for (int i = fs[a].body_lo; i < fs[a].body_hi; i++) {
            const tok *t = &v->t[i];
            if (t->kind != 'i' || i + 1 >= v->n || !eq(&v->t[i + 1], "(")) continue;
            if (i > 0 && (eq(&v->t[i - 1], ".") || eq(&v->t[i - 1], "->") || eq(&v->t[i - 1], "::"))) continue;
            for (int b = 0; b < n; b++)
                if (fs[b].ndefs == 1 && fs[b].name->len == t->len && memcmp(fs[b].name->p, t->p, (size_t)t->len) == 0)
                    calls[(size_t)a * n + b] = 1;
        }
    }
    /* depth-first search for a cycle */
    for (int s = 0; s < n && !f->msg; s++) {
        if (state[s]) continue;
        int sp = 0;
        stack[sp++] = s;
        state[s] = 1;
        iter[s] = 0;
        while (sp && !f->msg) {
            int a = stack[sp - 1];
            if (iter[a] >= n) {
                state[a] = 2;
                sp--;
                continue;
            }
            int b = iter[a]++;
            if (!calls[(size_t)a * n + b]) continue;
            if (state[b] == 1) {
                if (a == b)
                    report(f, fs[b].name, "Metal does not support recursion (`%.*s` calls itself)", fs[b].name->len,
                           fs[b].name->p);
                else
                    report(f, fs[b].name, "Metal does not support recursion (`%.*s` calls itself through `%.*s`)",
                           fs[b].name->len, fs[b].name->p, fs[a].name->len, fs[a].name->p);
            } else if (!state[b]) {
                state[b] = 1;
                iter[b] = 0;
                stack[sp++] = b;
            }
        }
    }
out:
    free(calls);
    free(state);
    free(stack);
    free(iter);
}

static char *check_text(const char *kernel_name, const char *what, const char *text, int structure) {
    char file[600];
    snprintf(file, sizeof file, "<kernel %.400s %s>", kernel_name, what);
    finding f = {file, NULL};
    toks v = {0};
    if (tokenize(text, &v, &f) < 0) goto out;
    check_words(&v, &f);
    if (!f.msg && structure) {
        func *fs = NULL;
        int n = 0;
        if (check_structure(&v, &f, &fs, &n) == 0 && !f.msg) check_recursion(&v, fs, n, &f);
        free(fs);
    }
out:
    free(v.t);
    return f.msg;
}

char *mkk_metal_check(const char *kernel_name, const char *source, const char *header) {
    char *m = header && *header ? check_text(kernel_name, "header", header, 1) : NULL;
    if (!m) m = check_text(kernel_name, "source", source, 0);
    return m;
}
