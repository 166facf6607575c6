/* Metal's active mask on the CUDA target (docs/design.md, "Metal's SIMD-group
 * semantics in divergent code").
 *
 * Under independent thread scheduling a warp's __activemask() is not Metal's
 * set of active lanes, so kernels with SIMD-group functions in divergent code
 * are rewritten to track that set explicitly. This pass runs on the translated
 * CUDA text (mkk_translate's output, lines kept) and wraps the divergent
 * constructs that need it in the RAII guards of mkpy_cuda.h:
 *
 *   if (c) A else B   -> { ::mkpy::simt_if<E, X> mkpy_g((c)); if (mkpy_g.then()) { A mkpy_g.then_end(); }
 *                          else if (mkpy_g.other()) B mkpy_g.stay(); }
 *   for (i; c; s) B   -> { ::mkpy::simt_loop<R> mkpy_l; for (i; mkpy_l.test((c)); s)
 *                          { ::mkpy::simt_iter<decltype(mkpy_l), X> mkpy_i(mkpy_l); B mkpy_i.stay(); } mkpy_l.stay(); }
 *   (while and do alike; `continue` towards a guarded loop -> { mkpy_i.cont(); continue; })
 *   c ? a : b         -> ::mkpy::simt_select((c), [&]() { return (a); }, [&]() { return (b); })
 *                        (when an arm calls a SIMD-group function)
 *
 * Inserted text never holds a newline, so the #line markers still hold. The
 * parse is a small recursive statement parser over tokens (not C++): it knows
 * blocks, if/else, for, while, do, switch, case labels, break, continue,
 * return, and treats everything else as an expression or declaration that
 * ends at a `;` outside brackets. Function bodies are the braces that follow a
 * `)` (qualifiers aside) outside any function. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

enum { T_ID, T_NUM, T_STR, T_P };

typedef struct {
    int kind, start, len;
} tok;

enum { N_ROOT, N_IF, N_LOOP, N_DO, N_RANGE, N_SWITCH, N_TERN, N_BLOCK };

typedef struct {
    int kind, parent;
    int kw;           /* the keyword's token (if, for, while, do); the `?` for N_TERN */
    int open, close;  /* the condition's parentheses; for N_TERN the first and last token */
    int cond_a, cond_b; /* for: the condition's first and last token (cond_a > cond_b: empty) */
    int semi2;        /* for: the second `;` */
    int body_end;     /* last token of the (then) body */
    int else_tok, else_end; /* -1 without else */
    int colon;        /* N_TERN: the matching `:` */
    int do_semi;      /* N_DO: the `;` after while (...) */
    int in_a, in_b;   /* the tokens that run under the statement's condition */
    int uses, guarded, leaves, returns, depth, div;
} node;

typedef struct {
    int at, order, skip;
    char text[160];
} edit;

typedef struct {
    const char *s;
    tok *t;
    int nt, cap;
    node *n;
    int nn, ncap;
    int *exits; /* token index of break/continue, parent node, target node, is_continue */
    int nex, excap;
    edit *e;
    int ne, ecap;
    tok *helpers; /* functions and macros that call SIMD-group functions (their names in s) */
    int nhelpers, hcap;
    tok *vary; /* names whose values may differ between the lanes of a SIMD-group */
    int nvary, vcap;
    int failed;
} pass;

static int is_id0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_id(char c) { return is_id0(c) || (c >= '0' && c <= '9'); }

static int grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int add_helper(pass *P, const char *name, int len) {
    if (grow((void **)&P->helpers, &P->hcap, P->nhelpers + 1, sizeof(tok)) < 0) return -1;
    P->helpers[P->nhelpers++] = (tok){T_ID, (int)(name - P->s), len};
    return 0;
}

/* A `#define NAME...` line [a, b) whose body names a SIMD-group function: NAME counts as a
 * function that calls one (the pass sees macros' uses, not their expansions). */
static int macro_helper(pass *P, int a, int b) {
    const char *s = P->s + a + 1;
    while (*s == ' ' || *s == '\t') s++;
    if (strncmp(s, "define", 6) != 0 || is_id(s[6])) return 0;
    s += 6;
    while (*s == ' ' || *s == '\t') s++;
    const char *name = s;
    while (is_id(*s)) s++;
    const int len = (int)(s - name);
    if (!len) return 0;
    for (const char *q = s; q < P->s + b; q++)
        if ((q == s || !is_id(q[-1])) && (strncmp(q, "simd_", 5) == 0 || strncmp(q, "quad_", 5) == 0))
            return add_helper(P, name, len);
    return 0;
}

static int tokenize(pass *P) {
    const char *s = P->s;
    int i = 0, line_start = 1;
    static const char *const ops[] = {"<<=", ">>=", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=",
                                      "==",  "!=",  "&&",  "||",  "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="};
    while (s[i]) {
        char c = s[i];
        if (c == '\n') {
            line_start = 1;
            i++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            i++;
            continue;
        }
        if (line_start && c == '#') { /* a preprocessor line, with continuations */
            const int a = i;
            while (s[i] && !(s[i] == '\n' && s[i - 1] != '\\')) i++;
            if (macro_helper(P, a, i) < 0) return -1;
            continue;
        }
        line_start = 0;
        if (c == '/' && s[i + 1] == '/') {
            while (s[i] && s[i] != '\n') i++;
            continue;
        }
        if (c == '/' && s[i + 1] == '*') {
            const char *e = strstr(s + i + 2, "*/");
            i = e ? (int)(e - s) + 2 : (int)strlen(s);
            continue;
        }
        if (grow((void **)&P->t, &P->cap, P->nt + 1, sizeof(tok)) < 0) return -1;
        tok *t = &P->t[P->nt++];
        t->start = i;
        if (c == '"' || c == '\'') {
            int j = i + 1;
            while (s[j] && s[j] != c && s[j] != '\n') j += (s[j] == '\\' && s[j + 1]) ? 2 : 1;
            if (s[j] == c) j++;
            t->kind = T_STR;
            t->len = j - i;
        } else if (is_id0(c)) {
            int j = i;
            while (is_id(s[j])) j++;
            t->kind = T_ID;
            t->len = j - i;
        } else if ((c >= '0' && c <= '9') || (c == '.' && s[i + 1] >= '0' && s[i + 1] <= '9')) {
            int j = i;
            while (is_id(s[j]) || s[j] == '.' || ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E')))
                j++;
            t->kind = T_NUM;
            t->len = j - i;
        } else {
            t->kind = T_P;
            t->len = 1;
            for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
                size_t l = strlen(ops[k]);
                if (strncmp(s + i, ops[k], l) == 0) {
                    t->len = (int)l;
                    break;
                }
            }
        }
        i += t->len;
    }
    return 0;
}

static int is(const pass *P, int i, const char *w) {
    if (i < 0 || i >= P->nt) return 0;
    const tok *t = &P->t[i];
    return (int)strlen(w) == t->len && memcmp(P->s + t->start, w, (size_t)t->len) == 0;
}

/* The token after the bracket opened at i (one past its match), or nt. */
static int match(const pass *P, int i) {
    int depth = 0;
    for (; i < P->nt; i++) {
        if (is(P, i, "(") || is(P, i, "[") || is(P, i, "{")) depth++;
        else if (is(P, i, ")") || is(P, i, "]") || is(P, i, "}")) {
            if (--depth == 0) return i + 1;
        }
    }
    return P->nt;
}

/* A call of a SIMD-group function (its name is the token at i, a `(` follows). */
static int simd_name(const pass *P, int i) {
    if (P->t[i].kind != T_ID) return 0;
    const char *w = P->s + P->t[i].start;
    int len = P->t[i].len;
    if ((len > 5 && strncmp(w, "simd_", 5) == 0) || (len > 5 && strncmp(w, "quad_", 5) == 0)) return 1;
    return is(P, i, "simdgroup_barrier") || is(P, i, "simdgroup_multiply") ||
           is(P, i, "simdgroup_multiply_accumulate");
}

static int is_helper(const pass *P, int i) {
    if (P->t[i].kind != T_ID) return 0;
    for (int h = 0; h < P->nhelpers; h++)
        if (P->helpers[h].len == P->t[i].len &&
            memcmp(P->s + P->helpers[h].start, P->s + P->t[i].start, (size_t)P->t[i].len) == 0)
            return 1;
    return 0;
}

/* Token i starts a call of a SIMD-group function or of a header function that calls one. */
static int simd_call(const pass *P, int i) {
    if (i + 1 >= P->nt || !(is(P, i + 1, "(") || is(P, i + 1, "<"))) return 0;
    if (is_helper(P, i)) return 1; /* (a member function of that name too: conservative) */
    if (i > 0 && (is(P, i - 1, ".") || is(P, i - 1, "->"))) return 0; /* a member */
    return is(P, i + 1, "(") && simd_name(P, i);
}

static int new_node(pass *P, int kind, int parent) {
    if (grow((void **)&P->n, &P->ncap, P->nn + 1, sizeof(node)) < 0) {
        P->failed = 1;
        return 0;
    }
    node *n = &P->n[P->nn];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->parent = parent;
    n->else_tok = n->else_end = -1;
    n->depth = parent >= 0 ? P->n[parent].depth + 1 : 0;
    return P->nn++;
}

/* Marks `flag` (an offset into node) on n and every node above it. */
static void mark_up(pass *P, int n, size_t flag) {
    for (; n >= 0; n = P->n[n].parent) *(int *)((char *)&P->n[n] + flag) = 1;
}

static int stmt(pass *P, int i, int parent);

/* Where a conditional operator's condition starts (the token after one of these). */
static int ternary_stop(const pass *P, int c) {
    static const char *const stops[] = {"(",  "[",  "{",  ",",  ";",  "?",   ":",   "=",      "+=",    "-=",  "*=",
                                        "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "return", "throw", "case"};
    for (size_t k = 0; k < sizeof stops / sizeof *stops; k++)
        if (is(P, c, stops[k])) return 1;
    return 0;
}

/* The opener matching the closer at token c (not before a; a - 1 if none). */
static int rmatch(const pass *P, int c, int a) {
    int depth = 0;
    for (; c >= a; c--) {
        if (is(P, c, ")") || is(P, c, "]") || is(P, c, "}")) depth++;
        if ((is(P, c, "(") || is(P, c, "[") || is(P, c, "{")) && --depth == 0) return c;
    }
    return a - 1;
}

/* The ternaries in tokens [a, b] of statement node `parent`, and its SIMD calls. */
static void expr(pass *P, int a, int b, int parent) {
    for (int i = a; i <= b && i < P->nt; i++) {
        if (simd_call(P, i)) mark_up(P, parent, offsetof(node, uses));
        if (!is(P, i, "?")) continue;
        /* the condition: back to an operator of lower precedence at this depth */
        int c = i - 1;
        while (c >= a && !ternary_stop(P, c)) c = (is(P, c, ")") || is(P, c, "]") || is(P, c, "}")) ? rmatch(P, c, a) - 1 : c - 1;
        const int first = c + 1;
        /* the matching `:` and the end of the second arm */
        int colon = -1, end = b, nested = 0;
        for (int j = i + 1; j <= b; j++) {
            if (is(P, j, "(") || is(P, j, "[") || is(P, j, "{")) {
                j = match(P, j) - 1;
                continue;
            }
            if (is(P, j, "?")) nested++;
            else if (is(P, j, ":")) {
                if (colon < 0 && nested == 0) {
                    colon = j;
                    continue;
                }
                if (colon >= 0 && nested == 0) {
                    end = j - 1;
                    break;
                }
                nested--;
            } else if (colon >= 0 && nested == 0 &&
                       (is(P, j, ",") || is(P, j, ";") || is(P, j, ")") || is(P, j, "]") || is(P, j, "}"))) {
                end = j - 1;
                break;
            }
        }
        if (colon < 0 || first >= i || end <= colon) continue;
        int simd = 0;
        for (int j = i + 1; j <= end && !simd; j++) simd = simd_call(P, j);
        if (!simd) continue;
        int t = new_node(P, N_TERN, parent);
        if (P->failed) return;
        node *n = &P->n[t];
        n->kw = i;
        n->open = first;
        n->close = end;
        n->colon = colon;
        n->in_a = i + 1;
        n->in_b = end;
        for (int m = 0; m < P->nn; m++) /* nested ternaries order their edits by depth */
            if (m != t && P->n[m].kind == N_TERN && P->n[m].open <= first && P->n[m].close >= end) n->depth++;
        mark_up(P, parent, offsetof(node, uses));
    }
}

/* Skips a `case x:` / `default:` label; returns the token after the colon. */
static int label(const pass *P, int i) {
    int j = i + 1;
    while (j < P->nt && !is(P, j, ":")) {
        if (is(P, j, "(") || is(P, j, "[") || is(P, j, "{")) j = match(P, j);
        else j++;
    }
    return j + 1;
}

static int block(pass *P, int i, int parent) { /* i: after `{`; returns after `}` */
    while (i < P->nt && !is(P, i, "}") && !P->failed) i = stmt(P, i, parent);
    return i + 1;
}

static int innermost(const pass *P, int n, int want_loop) {
    for (; n >= 0; n = P->n[n].parent) {
        const int k = P->n[n].kind;
        if (k == N_LOOP || k == N_DO || k == N_RANGE) return n;
        if (!want_loop && k == N_SWITCH) return n;
        if (k == N_ROOT) return -1;
    }
    return -1;
}

/* One statement starting at token i; returns the token after it. */
static int stmt(pass *P, int i, int parent) {
    if (i >= P->nt || P->failed) return P->nt;
    if (is(P, i, "{")) return block(P, i + 1, parent);
    if (is(P, i, ";")) return i + 1;
    if (is(P, i, "case") || is(P, i, "default")) {
        if (is(P, i, "default") && !is(P, i + 1, ":")) goto plain;
        return stmt(P, label(P, i), parent);
    }
    if (is(P, i, "if")) {
        int j = i + 1;
        int constexpr_if = is(P, j, "constexpr");
        if (constexpr_if) j++;
        if (!is(P, j, "(")) goto plain;
        int n = new_node(P, constexpr_if ? N_BLOCK : N_IF, parent); /* if constexpr: never guarded */
        if (P->failed) return P->nt;
        int close = match(P, j) - 1;
        P->n[n].kw = i;
        P->n[n].open = j;
        P->n[n].close = close;
        expr(P, j + 1, close - 1, n);
        int k = stmt(P, close + 1, n);
        P->n[n].body_end = k - 1;
        if (is(P, k, "else")) {
            P->n[n].else_tok = k;
            k = stmt(P, k + 1, n);
            P->n[n].else_end = k - 1;
        }
        P->n[n].in_a = close + 1;
        P->n[n].in_b = k - 1;
        return k;
    }
    if (is(P, i, "for") || is(P, i, "while")) {
        if (!is(P, i + 1, "(")) goto plain;
        int close = match(P, i + 1) - 1;
        int n = new_node(P, N_LOOP, parent);
        if (P->failed) return P->nt;
        P->n[n].kw = i;
        P->n[n].open = i + 1;
        P->n[n].close = close;
        if (is(P, i, "for")) {
            int s1 = -1, s2 = -1;
            for (int j = i + 2; j < close; j++) {
                if (is(P, j, "(") || is(P, j, "[") || is(P, j, "{")) {
                    j = match(P, j) - 1;
                    continue;
                }
                if (is(P, j, ";")) {
                    if (s1 < 0) s1 = j;
                    else if (s2 < 0) s2 = j;
                }
            }
            P->n[n].in_a = s1 + 1;
            if (s2 < 0) {
                P->n[n].kind = N_RANGE; /* for (x : range): left alone */
                P->n[n].in_a = close + 1;
            } else {
                P->n[n].cond_a = s1 + 1;
                P->n[n].cond_b = s2 - 1;
                P->n[n].semi2 = s2;
            }
        } else {
            P->n[n].cond_a = i + 2;
            P->n[n].cond_b = close - 1;
            P->n[n].in_a = i + 2;
        }
        expr(P, i + 2, close - 1, n);
        int k = stmt(P, close + 1, n);
        P->n[n].body_end = k - 1;
        P->n[n].in_b = k - 1;
        return k;
    }
    if (is(P, i, "do")) {
        int n = new_node(P, N_DO, parent);
        if (P->failed) return P->nt;
        P->n[n].kw = i;
        int k = stmt(P, i + 1, n);
        P->n[n].body_end = k - 1;
        P->n[n].in_a = i + 1;
        P->n[n].in_b = k - 1;
        if (!is(P, k, "while") || !is(P, k + 1, "(")) {
            P->n[n].kind = N_RANGE;
            return k;
        }
        int close = match(P, k + 1) - 1;
        P->n[n].open = k + 1;
        P->n[n].close = close;
        P->n[n].cond_a = k + 2;
        P->n[n].cond_b = close - 1;
        expr(P, k + 2, close - 1, n);
        P->n[n].do_semi = close + 1;
        P->n[n].in_b = close;
        return is(P, close + 1, ";") ? close + 2 : close + 1;
    }
    if (is(P, i, "switch") && is(P, i + 1, "(")) {
        int close = match(P, i + 1) - 1;
        int n = new_node(P, N_SWITCH, parent);
        if (P->failed) return P->nt;
        P->n[n].open = i + 1;
        P->n[n].close = close;
        expr(P, i + 2, close - 1, n);
        int k = stmt(P, close + 1, n);
        P->n[n].in_a = close + 1;
        P->n[n].in_b = k - 1;
        return k;
    }
    if (is(P, i, "break") || is(P, i, "continue")) {
        int cont = is(P, i, "continue");
        if (grow((void **)&P->exits, &P->excap, P->nex + 4, sizeof(int)) < 0) {
            P->failed = 1;
            return P->nt;
        }
        P->exits[P->nex++] = i;
        P->exits[P->nex++] = parent;
        P->exits[P->nex++] = innermost(P, parent, cont);
        P->exits[P->nex++] = cont;
        return is(P, i + 1, ";") ? i + 2 : i + 1;
    }
    if (is(P, i, "return")) {
        mark_up(P, parent, offsetof(node, returns));
        if (grow((void **)&P->exits, &P->excap, P->nex + 4, sizeof(int)) < 0) {
            P->failed = 1;
            return P->nt;
        }
        P->exits[P->nex++] = i;
        P->exits[P->nex++] = parent;
        P->exits[P->nex++] = -1; /* the function */
        P->exits[P->nex++] = 2;
    }
plain: {
    int j = i;
    while (j < P->nt && !is(P, j, ";")) {
        if (is(P, j, "(") || is(P, j, "[") || is(P, j, "{")) j = match(P, j);
        else if (is(P, j, "}")) break; /* a missing `;`: let the block end */
        else j++;
    }
    expr(P, i, j - 1, parent);
    return j < P->nt && is(P, j, ";") ? j + 1 : j;
}
}

/* Skips qualifiers back from the token before a `{`: a function body follows `)`. */
static int body_after_paren(const pass *P, int i) {
    int j = i - 1;
    while (j >= 0 && (is(P, j, "const") || is(P, j, "noexcept") || is(P, j, "override") || is(P, j, "final") ||
                      is(P, j, "mutable") || is(P, j, "volatile")))
        j--;
    return j >= 0 && is(P, j, ")") ? j : -1;
}

/* The name of the function whose parameter list closes at token `close`. */
static int function_name(const pass *P, int close) {
    int depth = 0;
    for (int j = close; j >= 0; j--) {
        if (is(P, j, ")")) depth++;
        if (is(P, j, "(") && --depth == 0) return j > 0 && P->t[j - 1].kind == T_ID ? j - 1 : -1;
    }
    return -1;
}

typedef struct {
    int name, open, end; /* name token, `{`, token after `}` */
    int simd;            /* calls a SIMD-group function (or a function or macro that does) */
} func;

/* ---------------------------------------------------------------- uniformity
 * Which values may differ between the lanes of a SIMD-group (a divergence
 * analysis on names, as GPU compilers do on SSA values): the lane's own thread
 * attributes, the parameters of header functions, what is computed from them,
 * and what is assigned under a condition that may differ between lanes. A name
 * is varying in every function once it is in one (conservative). A statement
 * is divergent when its condition is varying, or (a loop) when a lane may leave
 * an iteration early under a divergent statement. */

static int varying_name(const pass *P, int i) {
    for (int k = 0; k < P->nvary; k++)
        if (P->vary[k].len == P->t[i].len && memcmp(P->s + P->vary[k].start, P->s + P->t[i].start, (size_t)P->t[i].len) == 0)
            return 1;
    return 0;
}

static int make_varying(pass *P, int i) {
    if (P->t[i].kind != T_ID || varying_name(P, i)) return 0;
    if (grow((void **)&P->vary, &P->vcap, P->nvary + 1, sizeof(tok)) < 0) {
        P->failed = 1;
        return 0;
    }
    P->vary[P->nvary++] = P->t[i];
    return 1;
}

static int prefixed(const pass *P, int i, const char *w) {
    const size_t l = strlen(w);
    return P->t[i].kind == T_ID && (size_t)P->t[i].len >= l && memcmp(P->s + P->t[i].start, w, l) == 0;
}

/* SIMD-group functions whose result is the same on every lane (reductions, votes). */
static int uniform_call(const pass *P, int i) {
    static const char *const f[] = {"simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or",
                                    "simd_xor", "simd_all", "simd_any", "simd_ballot", "simd_broadcast_first",
                                    "simd_active_threads_mask"};
    for (size_t k = 0; k < sizeof f / sizeof *f; k++)
        if (is(P, i, f[k])) return 1;
    return 0;
}

/* Calls whose result may differ between lanes whatever the arguments. */
static int varying_call(const pass *P, int i) {
    return prefixed(P, i, "quad_") || prefixed(P, i, "simd_prefix") || is(P, i, "simd_is_first");
}

/* Tokens [a, b] compute a value that may differ between lanes. */
static int expr_varying(const pass *P, int a, int b) {
    for (int i = a; i <= b && i < P->nt; i++) {
        if (P->t[i].kind != T_ID) continue;
        if (i + 1 < P->nt && is(P, i + 1, "(")) {
            if (uniform_call(P, i)) {
                i = match(P, i + 1) - 1;
                continue;
            }
            if (varying_call(P, i)) return 1;
            continue;
        }
        if (i > 0 && (is(P, i - 1, ".") || is(P, i - 1, "->"))) continue; /* a member */
        if (varying_name(P, i)) return 1;
    }
    return 0;
}

static int in_divergent(const pass *P, int at) {
    for (int k = 0; k < P->nn; k++)
        if (P->n[k].div && P->n[k].in_a <= at && at <= P->n[k].in_b && P->n[k].kind != N_ROOT) return 1;
    return 0;
}

static int assign_op(const pass *P, int i) {
    static const char *const ops[] = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
        if (is(P, i, ops[k])) return 1;
    return 0;
}

static int keyword(const pass *P, int i) {
    static const char *const w[] = {"return", "else", "case", "throw", "new", "delete", "sizeof", "typename",
                                    "template", "using", "goto", "co_return", "operator"};
    for (size_t k = 0; k < sizeof w / sizeof *w; k++)
        if (is(P, i, w[k])) return 1;
    return 0;
}

/* The last token of the expression starting at a (before `,` `;` or a closer at depth 0). */
static int expr_end(const pass *P, int a, int limit) {
    int i = a;
    while (i < limit) {
        if (is(P, i, "(") || is(P, i, "[") || is(P, i, "{")) {
            i = match(P, i);
            continue;
        }
        if (is(P, i, ",") || is(P, i, ";") || is(P, i, ")") || is(P, i, "]") || is(P, i, "}")) break;
        i++;
    }
    return i - 1;
}

/* One round over the function body [a, b): names assigned varying values, or
 * assigned under a divergent statement, become varying. Returns 1 on a change. */
static int assignments(pass *P, int a, int b, const func *fs, int nf) {
    int changed = 0;
    for (int p = a; p < b && !P->failed; p++) {
        if (assign_op(P, p)) {
            int q = p - 1, idx = 0;
            for (;;) {
                if (q > a && is(P, q, "]")) {
                    int o = rmatch(P, q, a);
                    idx |= expr_varying(P, o + 1, q - 1);
                    q = o - 1;
                } else if (q > a + 1 && P->t[q].kind == T_ID && (is(P, q - 1, ".") || is(P, q - 1, "->"))) {
                    q -= 2;
                } else {
                    break;
                }
            }
            if (q < a || P->t[q].kind != T_ID) continue;
            if (idx || expr_varying(P, p + 1, expr_end(P, p + 1, b)) || in_divergent(P, p)) changed |= make_varying(P, q);
        } else if (is(P, p, "++") || is(P, p, "--")) {
            if (!in_divergent(P, p)) continue;
            if (P->t[p + 1].kind == T_ID) changed |= make_varying(P, p + 1);
            if (p > a && P->t[p - 1].kind == T_ID) changed |= make_varying(P, p - 1);
        } else if (is(P, p, "&") && p + 1 < b && P->t[p + 1].kind == T_ID && p > a && P->t[p - 1].kind == T_P &&
                   !is(P, p - 1, ")") && !is(P, p - 1, "]")) {
            changed |= make_varying(P, p + 1); /* its address is taken: anything may write it */
        } else if (P->t[p].kind == T_ID && p > a && P->t[p - 1].kind == T_ID && !keyword(P, p - 1) &&
                   (is(P, p + 1, "(") || is(P, p + 1, "{")) && !is(P, p - 1, "return")) {
            /* T name(init) or T name{init} */
            const int e = match(P, p + 1) - 1;
            if (expr_varying(P, p + 2, e - 1) || in_divergent(P, p)) changed |= make_varying(P, p);
        } else if (P->t[p].kind == T_ID && is(P, p + 1, "(")) {
            /* a header function (or one with reference parameters) may write plain names passed to it */
            int writes = is(P, p, "sincos") || is(P, p, "modf") || is(P, p, "frexp") || is(P, p, "remquo");
            for (int f = 0; f < nf && !writes; f++)
                writes = fs[f].name >= 0 && P->t[fs[f].name].len == P->t[p].len &&
                         memcmp(P->s + P->t[fs[f].name].start, P->s + P->t[p].start, (size_t)P->t[p].len) == 0;
            if (!writes) continue;
            const int e = match(P, p + 1) - 1;
            for (int k = p + 2; k < e; k++)
                if (P->t[k].kind == T_ID && (is(P, k - 1, "(") || is(P, k - 1, ",")) && (is(P, k + 1, ",") || is(P, k + 1, ")")))
                    changed |= make_varying(P, k);
        } else if (is(P, p, ":") && P->t[p - 1].kind == T_ID) {
            changed |= make_varying(P, p - 1); /* for (T x : range) */
        }
    }
    return changed;
}

/* One round over the statements: a condition that may differ between lanes
 * makes its statement divergent; so does, for a loop, a way out of an
 * iteration under a divergent statement. Returns 1 on a change. */
static int divergence(pass *P) {
    int changed = 0;
    for (int k = 0; k < P->nn; k++) {
        node *n = &P->n[k];
        if (n->div) continue;
        int d = 0;
        if (n->kind == N_IF || n->kind == N_SWITCH) d = expr_varying(P, n->open + 1, n->close - 1);
        else if (n->kind == N_LOOP || n->kind == N_DO) d = n->cond_a <= n->cond_b && expr_varying(P, n->cond_a, n->cond_b);
        else if (n->kind == N_TERN) d = expr_varying(P, n->open, n->kw - 1);
        if (d) n->div = changed = 1;
    }
    for (int x = 0; x < P->nex; x += 4) {
        const int parent = P->exits[x + 1], target = P->exits[x + 2];
        int seen = 0;
        for (int n = parent; n >= 0; n = P->n[n].parent) {
            node *m = &P->n[n];
            if ((m->kind == N_LOOP || m->kind == N_DO || m->kind == N_RANGE) && seen && !m->div) m->div = changed = 1;
            seen |= m->div;
            if (n == target) break;
        }
    }
    return changed;
}

static void add_edit(pass *P, int at, int order, int skip, const char *text) {
    if (P->failed) return;
    if (grow((void **)&P->e, &P->ecap, P->ne + 1, sizeof(edit)) < 0) {
        P->failed = 1;
        return;
    }
    edit *e = &P->e[P->ne++];
    e->at = at;
    e->order = order;
    e->skip = skip;
    snprintf(e->text, sizeof e->text, "%s", text);
}

static int tok_end(const pass *P, int i) { return P->t[i].start + P->t[i].len; }

/* Edit order at one offset: closings (inner first) before openings (outer first). */
#define CLOSE(d) (1000 - (d))
#define OPEN(d) (2000 + (d))

/* 1 when a threadgroup barrier is called between tokens a and b (directly:
 * a helper function's barriers are not seen). */
static int has_barrier(const pass *P, int a, int b) {
    for (int i = a; i <= b && i < P->nt; i++)
        if (is(P, i, "threadgroup_barrier_at") || is(P, i, "threadgroup_barrier")) return 1;
    return 0;
}

static void emit(pass *P, int idx) {
    node *n = &P->n[idx];
    char buf[160];
    const int d = n->depth * 2;
    if (n->kind == N_IF) {
        /* A side that calls a threadgroup barrier runs beside the other side (no side syncs): with
         * the warp split, the then side's lanes wait in the barrier for the else side's, which
         * would wait at the side sync for them, a hang where the barrier check should report. */
        if (n->else_tok >= 0 && has_barrier(P, n->close + 1, n->else_end))
            snprintf(buf, sizeof buf, "{ ::mkpy::simt_if<1, %d, true> mkpy_g(static_cast<bool>", n->leaves);
        else
            snprintf(buf, sizeof buf, "{ ::mkpy::simt_if<%d, %d> mkpy_g(static_cast<bool>", n->else_tok >= 0,
                     n->leaves);
        add_edit(P, P->t[n->kw].start, OPEN(d), P->t[n->kw].len, buf);
        add_edit(P, tok_end(P, n->close), CLOSE(d + 1), 0, "); if (mkpy_g.then()) {");
        add_edit(P, tok_end(P, n->body_end), CLOSE(d + 1), 0, n->else_tok >= 0 ? " mkpy_g.then_end(); }" : " }");
        if (n->else_tok >= 0) add_edit(P, P->t[n->else_tok].start, OPEN(d), P->t[n->else_tok].len, "else if (mkpy_g.other())");
        add_edit(P, tok_end(P, n->else_tok >= 0 ? n->else_end : n->body_end), CLOSE(d), 0, " mkpy_g.stay(); }");
    } else if (n->kind == N_LOOP || n->kind == N_DO) {
        snprintf(buf, sizeof buf, "{ ::mkpy::simt_loop<%d> mkpy_l; %s", n->returns,
                 n->kind == N_DO ? "do" : is(P, n->kw, "for") ? "for" : "while");
        add_edit(P, P->t[n->kw].start, OPEN(d), P->t[n->kw].len, buf);
        char iter[160];
        snprintf(iter, sizeof iter, " { ::mkpy::simt_iter<decltype(mkpy_l), %d> mkpy_i(mkpy_l);", n->leaves);
        if (n->cond_a <= n->cond_b) {
            add_edit(P, P->t[n->cond_a].start, OPEN(d + 1), 0, "mkpy_l.test(static_cast<bool>(");
            add_edit(P, tok_end(P, n->cond_b), CLOSE(d + 1), 0, "))");
        } else {
            add_edit(P, P->t[n->semi2].start, OPEN(d + 1), 0, "mkpy_l.test(true)");
        }
        if (n->kind == N_DO) add_edit(P, tok_end(P, n->kw), CLOSE(d + 1), 0, iter);
        else add_edit(P, tok_end(P, n->close), CLOSE(d + 1), 0, iter);
        add_edit(P, tok_end(P, n->body_end), CLOSE(d + 1), 0, " mkpy_i.stay(); }");
        add_edit(P, tok_end(P, n->kind == N_DO ? (is(P, n->do_semi, ";") ? n->do_semi : n->close) : n->body_end),
                 CLOSE(d), 0, " mkpy_l.stay(); }");
    } else if (n->kind == N_TERN) {
        const int td = 2 * n->depth + 1;
        add_edit(P, P->t[n->open].start, OPEN(td), 0, "::mkpy::simt_select(static_cast<bool>(");
        add_edit(P, P->t[n->kw].start, OPEN(td), 1, "), [&]() { return (");
        add_edit(P, P->t[n->colon].start, OPEN(td), 1, "); }, [&]() { return (");
        add_edit(P, tok_end(P, n->close), CLOSE(td), 0, "); })");
    }
}

static int by_place(const void *a, const void *b) {
    const edit *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->order - y->order;
}

static void pass_free(pass *P) {
    free(P->t);
    free(P->n);
    free(P->exits);
    free(P->e);
    free(P->helpers);
    free(P->vary);
}

int mkk_simt_rewrite(const char *cpp, char **out_text) {
    pass P = {0};
    P.s = cpp;
    func *fs = NULL;
    int nf = 0, fcap = 0;
    *out_text = NULL;
    if (tokenize(&P) < 0) goto nomem;
    /* the function bodies outside any function */
    for (int i = 0; i < P.nt; i++) {
        if (!is(&P, i, "{")) continue;
        int close = body_after_paren(&P, i);
        if (close < 0) continue;
        if (grow((void **)&fs, &fcap, nf + 1, sizeof *fs) < 0) goto nomem;
        fs[nf].name = function_name(&P, close);
        fs[nf].simd = 0;
        fs[nf].open = i;
        fs[nf].end = match(&P, i);
        i = fs[nf++].end - 1;
    }
    /* header functions that call SIMD-group functions, transitively */
    int simd_any = 0, shared = 0, has_else = 0;
    for (int i = 0; i < P.nt; i++) {
        shared |= is(&P, i, "__shared__");
        has_else |= is(&P, i, "else");
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int f = 0; f < nf; f++) {
            if (fs[f].simd) continue;
            for (int i = fs[f].open; i < fs[f].end && !fs[f].simd; i++) fs[f].simd = simd_call(&P, i);
            if (!fs[f].simd) continue;
            simd_any = changed = 1;
            if (fs[f].name >= 0 && add_helper(&P, P.s + P.t[fs[f].name].start, P.t[fs[f].name].len) < 0) goto nomem;
        }
    }
    if (!simd_any && !(shared && has_else)) {
        free(fs);
        pass_free(&P);
        return 0; /* not rewritten */
    }
    for (int f = 0; f < nf && !P.failed; f++) {
        int root = new_node(&P, N_ROOT, -1);
        if (P.failed) break;
        block(&P, fs[f].open + 1, root);
    }
    if (P.failed) goto nomem;
    /* what differs between lanes: the lane's own attributes, header functions' parameters */
    static const char *const lane_attrs[] = {"thread_position_in_grid",        "thread_position_in_threadgroup",
                                             "thread_index_in_threadgroup",    "thread_index_in_simdgroup",
                                             "thread_index_in_quadgroup",      "quadgroup_index_in_threadgroup"};
    for (int i = 0; i < P.nt; i++)
        for (size_t k = 0; k < sizeof lane_attrs / sizeof *lane_attrs; k++)
            if (is(&P, i, lane_attrs[k])) make_varying(&P, i);
    for (int f = 0; f < nf; f++) {
        if (fs[f].name < 0 || prefixed(&P, fs[f].name, "custom_kernel_")) continue;
        const int close = match(&P, fs[f].name + 1) - 1;
        int last = -1, in_default = 0;
        for (int i = fs[f].name + 2; i <= close; i++) {
            if (is(&P, i, "(") || is(&P, i, "[") || is(&P, i, "{") || is(&P, i, "<")) {
                i = is(&P, i, "<") ? i : match(&P, i) - 1;
                continue;
            }
            if (is(&P, i, ",") || i == close) {
                if (last >= 0) make_varying(&P, last);
                last = -1;
                in_default = 0;
            } else if (is(&P, i, "=")) {
                in_default = 1;
            } else if (!in_default && P.t[i].kind == T_ID) {
                last = i;
            }
        }
    }
    for (int changed = 1; changed && !P.failed;) {
        changed = divergence(&P);
        for (int f = 0; f < nf; f++) changed |= assignments(&P, fs[f].open + 1, fs[f].end - 1, fs, nf);
    }
    if (P.failed) goto nomem;
    /* Rewritten only with a SIMD-group call in divergent code, a way out of the
     * function under a divergent statement before SIMD-group calls, or (with
     * threadgroup memory) a divergent `if` with `else`, whose sides' order then
     * matters. */
    int need = 0;
    for (int f = 0; f < nf && !need; f++)
        for (int i = fs[f].open; i < fs[f].end && !need; i++) need = simd_call(&P, i) && in_divergent(&P, i);
    for (int x = 0; x < P.nex && !need; x += 4)
        if (P.exits[x + 3] == 2) need = in_divergent(&P, P.exits[x]) && simd_any;
    for (int i = 0; i < P.nn && !need; i++) need = shared && P.n[i].kind == N_IF && P.n[i].else_tok >= 0 && P.n[i].div;
    if (!need) {
        free(fs);
        pass_free(&P);
        return 0;
    }
    /* a divergent `if` with `else` orders its sides; guard the divergent
     * statements that hold a SIMD-group call or a way out, and those a lane may
     * leave towards a guarded loop */
    for (int i = 0; i < P.nn; i++)
        if (P.n[i].kind == N_IF && P.n[i].else_tok >= 0 && P.n[i].div) mark_up(&P, i, offsetof(node, uses));
    for (int i = 0; i < P.nn; i++) {
        node *n = &P.n[i];
        if (n->kind == N_IF || n->kind == N_LOOP || n->kind == N_DO) n->guarded = n->div && (n->uses || n->returns);
        if (n->kind == N_TERN) n->guarded = n->div;
        if (n->kind == N_IF || n->kind == N_LOOP || n->kind == N_DO) n->leaves = n->returns;
    }
    for (int x = 0; x < P.nex; x += 4) {
        const int at = P.exits[x], parent = P.exits[x + 1], target = P.exits[x + 2], cont = P.exits[x + 3];
        const int towards_guard = target >= 0 && P.n[target].guarded;
        for (int n = parent; n >= 0 && n != target; n = P.n[n].parent) {
            P.n[n].leaves = 1; /* the lane leaves these statements early */
            if (towards_guard && P.n[n].div) P.n[n].guarded = 1;
        }
        if (!towards_guard) continue;
        if (!cont) P.n[target].leaves = 1; /* a break leaves the iteration */
        else {
            add_edit(&P, P.t[at].start, OPEN(1000), P.t[at].len, "{ mkpy_i.cont(); continue; }");
            if (is(&P, at + 1, ";")) add_edit(&P, P.t[at + 1].start, OPEN(1000), 1, "");
        }
    }
    /* (the statements around a guarded one are guarded too, or uniform: every lane of the mask goes the same way) */
    for (int i = 0; i < P.nn; i++)
        if (P.n[i].guarded) emit(&P, i);
    if (P.failed) goto nomem;
    qsort(P.e, (size_t)P.ne, sizeof *P.e, by_place);
    mkk_sbuf b = {0};
    int at = 0;
    for (int k = 0; k < P.ne; k++) {
        const edit *e = &P.e[k];
        if (e->at < at) continue; /* inside text an earlier edit skipped (not expected) */
        char *piece = malloc((size_t)(e->at - at) + 1);
        if (!piece) {
            free(b.s);
            goto nomem;
        }
        memcpy(piece, cpp + at, (size_t)(e->at - at));
        piece[e->at - at] = 0;
        mkk_sb(&b, piece);
        free(piece);
        mkk_sb(&b, e->text);
        at = e->at + e->skip;
    }
    mkk_sb(&b, cpp + at);
    if (b.failed) goto nomem;
    *out_text = b.s;
    free(fs);
    pass_free(&P);
    return 1;
nomem:
    free(fs);
    pass_free(&P);
    mk_nomem();
    return -1;
}
