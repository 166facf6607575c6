/* einsum and einsum_path, as MLX's (mlx/einsum.cpp, itself after NumPy's
 * einsumfunc and opt_einsum).
 *
 * Parsing: spaces are dropped; without "->" the output is every letter seen
 * once, sorted (an ellipsis first). An ellipsis expands to the last unused
 * letters (a-z then A-Z), as many as the operand has extra dims; the output's
 * takes the longest. Letters of size 1 broadcast against other sizes.
 *
 * Path: with up to two operands, one step over all of them; else the greedy
 * search: among pairs sharing a letter (all pairs when none do), take the one
 * removing the most elements, then the cheapest, first in candidate order;
 * candidates too large (beyond the largest input or output term) or costing
 * more than the naive contraction are skipped; when none is left the rest are
 * contracted in one naive step.
 *
 * Evaluation, per step: repeated letters of an operand become diagonals,
 * letters in one operand only are summed, then a pair with a contracted
 * letter goes through one batched matmul (transposes and reshapes around it),
 * anything else through broadcast multiplies and a sum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linalg.h"

#define NL 52      /* letters */
#define SUBMAX 128 /* characters of one subscript */

typedef struct {
    char s[SUBMAX];
    int n;
    uint64_t set;
} sub;

static int letter(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + c - 'A';
    return -1;
}

static bool is_alpha(char c) { return letter(c) >= 0; }

static void sub_set(sub *x) {
    x->set = 0;
    for (int i = 0; i < x->n; i++) x->set |= 1ull << letter(x->s[i]);
}

static int popcount(uint64_t v) { return __builtin_popcountll(v); }

typedef struct {
    int64_t dim[NL];
} dims;

static int64_t term_size_set(uint64_t set, const dims *d) {
    int64_t size = 1;
    for (int c = 0; c < NL; c++)
        if (set >> c & 1) size *= d->dim[c];
    return size;
}

static int64_t term_size_str(const sub *x, const dims *d) {
    int64_t size = 1;
    for (int i = 0; i < x->n; i++) size *= d->dim[letter(x->s[i])];
    return size;
}

static int64_t flop_count(uint64_t term, bool inner, int nterms, const dims *d) {
    int64_t f = nterms - 1 > 1 ? nterms - 1 : 1;
    if (inner) f += 1;
    return term_size_set(term, d) * f;
}

typedef struct {
    int n;           /* inputs of this step */
    sub in[64];      /* their subscripts */
    int pos[64];     /* their positions in the operand list */
    sub out;
} step;

typedef struct {
    int nsteps;
    step *steps;
    int64_t naive_cost, opt_cost;
    int naive_scaling, opt_scaling;
} plan;

static void cost_scaling(int n, const sub *in, const sub *out, const dims *d, int64_t *cost, int *scaling) {
    uint64_t all = 0;
    for (int i = 0; i < n; i++) all |= in[i].set;
    *cost = flop_count(all, (all & ~out->set) != 0, n, d);
    *scaling = popcount(all);
}

/* ------------------------------------------------------------- greedy */

typedef struct {
    int64_t size; /* removed elements */
    int64_t cost;
    uint64_t out;
    int ndims, x, y;
} cand;

typedef struct {
    cand *c;
    int n, cap;
} cands;

static int cand_push(cands *cs, cand c) {
    if (cs->n == cs->cap) {
        int cap = cs->cap ? 2 * cs->cap : 64;
        cand *p = realloc(cs->c, sizeof *p * (size_t)cap);
        if (!p) {
            mk_nomem();
            return -1;
        }
        cs->c = p;
        cs->cap = cap;
    }
    cs->c[cs->n++] = c;
    return 0;
}

static int add_cand(cands *cs, int nin, const sub *in, const sub *out, const dims *d, int p1, int p2,
                    int64_t path_cost, int64_t cost_limit, int64_t mem_limit) {
    uint64_t con = in[p1].set | in[p2].set, keep = 0;
    for (int i = 0; i < nin; i++)
        if (i != p1 && i != p2) keep |= in[i].set & con;
    keep |= out->set & con;
    int64_t new_size = term_size_set(keep, d);
    if (new_size > mem_limit) return 0;
    int64_t removed = term_size_set(in[p1].set, d) + term_size_set(in[p2].set, d) - new_size;
    int64_t cost = flop_count(con, popcount(con) > popcount(keep), 2, d);
    if (path_cost + cost > cost_limit) return 0;
    return cand_push(cs, (cand){removed, cost, keep, popcount(con), p1, p2});
}

/* Orders letters by their size, then by letter (insertion sort: few letters). */
static void sort_by_size(char *s, int n, const dims *d) {
    for (int i = 1; i < n; i++) {
        char c = s[i];
        int lc = letter(c), j = i - 1;
        while (j >= 0) {
            int lj = letter(s[j]);
            if (d->dim[lj] < d->dim[lc] || (d->dim[lj] == d->dim[lc] && lj < lc)) break;
            s[j + 1] = s[j];
            j--;
        }
        s[j + 1] = c;
    }
}

static int greedy(plan *P, int nin, sub *in, const sub *out, const dims *d, int64_t cost_limit, int64_t mem_limit) {
    int *pos = malloc(sizeof(int) * (size_t)nin * 2 + 16);
    int (*pairs)[2] = malloc(sizeof *pairs * (size_t)(nin * nin + 1));
    cands cs = {0};
    int np = 0, rc = -1;
    if (!pos || !pairs) {
        mk_nomem();
        goto done;
    }
    for (int i = 0; i < nin; i++)
        for (int j = i + 1; j < nin; j++) pairs[np][0] = i, pairs[np++][1] = j;
    int64_t path_cost = 0;
    int scaling = 0, total = nin;
    for (int it = 0; it < total - 1; it++) {
        for (int k = 0; k < np; k++)
            if (in[pairs[k][0]].set & in[pairs[k][1]].set)
                if (add_cand(&cs, nin, in, out, d, pairs[k][0], pairs[k][1], path_cost, cost_limit, mem_limit) < 0)
                    goto done;
        if (cs.n == 0)
            for (int k = 0; k < np; k++)
                if (add_cand(&cs, nin, in, out, d, pairs[k][0], pairs[k][1], path_cost, cost_limit, mem_limit) < 0)
                    goto done;
        step *s = &P->steps[P->nsteps];
        if (cs.n == 0) {
            /* the rest in one naive step */
            int64_t c;
            int sc;
            s->n = nin;
            for (int i = 0; i < nin; i++) {
                s->in[i] = in[i];
                s->pos[i] = i;
            }
            s->out = *out;
            P->nsteps++;
            cost_scaling(nin, in, out, d, &c, &sc);
            path_cost += c;
            if (sc > scaling) scaling = sc;
            break;
        }
        int b = 0;
        for (int k = 1; k < cs.n; k++)
            if (cs.c[k].size > cs.c[b].size || (cs.c[k].size == cs.c[b].size && cs.c[k].cost < cs.c[b].cost)) b = k;
        cand best = cs.c[b];
        if (best.ndims > scaling) scaling = best.ndims;
        sub no = {.n = 0, .set = best.out};
        for (int c = 0; c < NL; c++)
            if (best.out >> c & 1) no.s[no.n++] = (char)(c < 26 ? 'a' + c : 'A' + c - 26);
        sort_by_size(no.s, no.n, d);
        s->n = 2;
        s->in[0] = in[best.x];
        s->in[1] = in[best.y];
        s->pos[0] = best.x;
        s->pos[1] = best.y;
        s->out = no;
        P->nsteps++;
        memmove(in + best.y, in + best.y + 1, sizeof *in * (size_t)(nin - best.y - 1));
        memmove(in + best.x, in + best.x + 1, sizeof *in * (size_t)(nin - best.x - 1));
        nin -= 2;
        in[nin++] = no;
        int kept = 0;
        for (int k = 0; k < cs.n; k++) {
            cand c = cs.c[k];
            if (c.x == best.x || c.x == best.y || c.y == best.x || c.y == best.y) continue;
            c.x -= (c.x > best.x) + (c.x > best.y);
            c.y -= (c.y > best.x) + (c.y > best.y);
            cs.c[kept++] = c;
        }
        cs.n = kept;
        np = 0;
        for (int i = 0; i < nin - 1; i++) pairs[np][0] = i, pairs[np++][1] = nin - 1;
        path_cost += best.cost;
    }
    P->opt_cost = path_cost;
    P->opt_scaling = scaling;
    rc = 0;
done:
    free(pos);
    free(pairs);
    free(cs.c);
    return rc;
}

/* ------------------------------------------------------------- parsing */

/* Expands the ellipsis of x (operand ndim, or nd < 0 for the output, which
 * takes *maxlen). */
static int expand(const char *fn, sub *x, int nd, int idx, const mk_array *op, const char *rem, int nrem, int *maxlen) {
    bool have = false;
    int before = 0, after = 0, at = -1;
    for (int i = 0; i < x->n; i++) {
        if (!is_alpha(x->s[i])) {
            if (i + 2 >= x->n || x->s[i] != '.' || x->s[i + 1] != '.' || x->s[i + 2] != '.') {
                mk_error_set(MK_ERR_VALUE, "[%s] Subscripts must be letters, but got '%c'.", fn, x->s[i]);
                return -1;
            }
            if (have) {
                mk_error_set(MK_ERR_VALUE,
                             "[%s] Only one ellipsis per subscript is allowed but found more in '%.*s'.", fn, x->n,
                             x->s);
                return -1;
            }
            have = true;
            at = i;
            i += 2;
            continue;
        }
        if (have)
            after++;
        else
            before++;
    }
    if (!have) return 0;
    int len;
    if (nd >= 0) {
        len = nd - before - after;
        if (len < 0) {
            char sh[512];
            mk_error_set(MK_ERR_VALUE,
                         "[%s] Operand %d with shape %s has insufficient dimensions for subscript '%.*s'. The "
                         "ellipsis requires at least %d dimensions but the operand has %d dimensions.",
                         fn, idx, mk_shape_str(op->ndim, op->shape, sh, sizeof sh), x->n, x->s, before + after, nd);
            return -1;
        }
        if (len > *maxlen) *maxlen = len;
    } else {
        len = *maxlen;
    }
    if (len > nrem || x->n - 3 + len >= SUBMAX) {
        mk_error_set(MK_ERR_VALUE, "[%s] Too many dimensions for the letters left to the ellipsis.", fn);
        return -1;
    }
    char tail[SUBMAX];
    int nt = x->n - at - 3;
    memcpy(tail, x->s + at + 3, (size_t)nt);
    memcpy(x->s + at, rem + nrem - len, (size_t)len);
    memcpy(x->s + at + len, tail, (size_t)nt);
    x->n = at + len + nt;
    return 0;
}

static int set_sub(sub *x, const char *s, size_t n, const char *fn) {
    if (n >= SUBMAX) {
        mk_error_set(MK_ERR_VALUE, "[%s] Subscript too long.", fn);
        return -1;
    }
    memcpy(x->s, s, n);
    x->n = (int)n;
    return 0;
}

static int cmp_char(const void *a, const void *b) { return *(const unsigned char *)a - *(const unsigned char *)b; }

/* Builds the plan. ins gets the input subscripts (n of them). */
static int make_plan(const char *fn, const char *subscripts, int n, mk_array *const *ops, plan *P, dims *d) {
    memset(P, 0, sizeof *P);
    if (n == 0) {
        mk_error_set(MK_ERR_VALUE, "[%s] At least one operand is required.", fn);
        return -1;
    }
    size_t L = strlen(subscripts);
    char *str = malloc(L + 1);
    sub *in = malloc(sizeof(sub) * (size_t)(n + 1)), out;
    int rc = -1, nin = 0;
    if (!str || !in) {
        mk_nomem();
        goto done;
    }
    size_t m = 0;
    for (size_t i = 0; i < L; i++)
        if (subscripts[i] != ' ') str[m++] = subscripts[i];
    str[m] = 0;
    char *arrow = strstr(str, "->"), *lhs_end;
    if (arrow) {
        lhs_end = arrow;
        if (set_sub(&out, arrow + 2, strlen(arrow + 2), fn) < 0) goto done;
    } else {
        lhs_end = str + m;
        int count[256] = {0};
        char rhs[SUBMAX + 256];
        int nr = 0;
        for (size_t i = 0; i < m; i++) {
            unsigned char c = (unsigned char)str[i];
            if (c == ',') continue;
            if (c == '.' && nr == 0) {
                memcpy(rhs, "...", 3);
                nr = 3;
                continue;
            }
            count[c]++;
        }
        for (int c = 0; c < 256; c++)
            if (count[c] == 1) rhs[nr++] = (char)c;
        qsort(rhs, (size_t)nr, 1, cmp_char);
        if (set_sub(&out, rhs, (size_t)nr, fn) < 0) goto done;
    }
    /* comma-separated inputs (a trailing empty piece is not one) */
    for (const char *p = str; p < lhs_end;) {
        const char *c = memchr(p, ',', (size_t)(lhs_end - p));
        const char *e = c ? c : lhs_end;
        if (nin == n) {
            nin++;
            break;
        }
        if (set_sub(&in[nin++], p, (size_t)(e - p), fn) < 0) goto done;
        p = c ? c + 1 : lhs_end;
    }
    if (nin != n) {
        int count = 0;
        for (const char *p = str; p < lhs_end;) { /* getline's pieces */
            const char *c = memchr(p, ',', (size_t)(lhs_end - p));
            count++;
            p = c ? c + 1 : lhs_end;
        }
        mk_error_set(MK_ERR_VALUE, "[%s] Number of operands, %d, does not match number of input subscripts, %d", fn,
                     n, count);
        goto done;
    }
    /* the letters left for ellipses */
    char rem[NL];
    int nrem = 0;
    bool used[256] = {0};
    for (size_t i = 0; i < L; i++) used[(unsigned char)subscripts[i]] = true;
    for (char c = 'a'; c <= 'z'; c++)
        if (!used[(unsigned char)c]) rem[nrem++] = c;
    for (char c = 'A'; c <= 'Z'; c++)
        if (!used[(unsigned char)c]) rem[nrem++] = c;
    int maxlen = 0;
    for (int i = 0; i < n; i++)
        if (expand(fn, &in[i], ops[i]->ndim, i, ops[i], rem, nrem, &maxlen) < 0) goto done;
    if (expand(fn, &out, -1, -1, NULL, rem, nrem, &maxlen) < 0) goto done;
    sub_set(&out);
    if (popcount(out.set) != out.n) {
        mk_error_set(MK_ERR_VALUE, "[%s] Repeat indices not allowed in output.", fn);
        goto done;
    }
    for (int c = 0; c < NL; c++) d->dim[c] = -1;
    uint64_t seen = 0;
    for (int i = 0; i < n; i++) {
        sub *x = &in[i];
        const mk_array *op = ops[i];
        sub_set(x);
        if (x->n != op->ndim) {
            mk_error_set(MK_ERR_VALUE, "[%s] Invalid number of subscripts %d for input %d with %d dimensions.", fn,
                         x->n, i, op->ndim);
            goto done;
        }
        int64_t local[NL];
        for (int c = 0; c < NL; c++) local[c] = -1;
        for (int j = 0; j < x->n; j++) {
            int c = letter(x->s[j]);
            int64_t dim = op->shape[j];
            if (local[c] >= 0 && local[c] != dim) {
                mk_error_set(MK_ERR_VALUE,
                             "[%s] Dimensions of repeated subscripts do not have the same size (%lld != %lld).", fn,
                             (long long)local[c], (long long)dim);
                goto done;
            }
            local[c] = dim;
        }
        for (int j = 0; j < x->n; j++) {
            int c = letter(x->s[j]);
            int64_t dim = op->shape[j];
            if (d->dim[c] < 0) d->dim[c] = dim;
            if (dim != 1 && d->dim[c] != 1 && d->dim[c] != dim) {
                char sh[512];
                mk_error_set(MK_ERR_VALUE, "[%s] Cannot broadcast dimension %d of input %d with shape %s to size %lld.",
                             fn, j, i, mk_shape_str(op->ndim, op->shape, sh, sizeof sh), (long long)d->dim[c]);
                goto done;
            }
            if (dim > d->dim[c]) d->dim[c] = dim;
        }
        seen |= x->set;
    }
    if (out.set & ~seen) {
        for (int j = 0; j < out.n; j++)
            if (!(seen >> letter(out.s[j]) & 1)) {
                mk_error_set(MK_ERR_VALUE, "[%s] Output subscript '%c' does not appear in any input.", fn, out.s[j]);
                break;
            }
        goto done;
    }
    int64_t max_size = term_size_str(&out, d);
    for (int i = 0; i < n; i++) {
        int64_t t = term_size_str(&in[i], d);
        if (t > max_size) max_size = t;
    }
    cost_scaling(n, in, &out, d, &P->naive_cost, &P->naive_scaling);
    if (n > 64) {
        mk_error_set(MK_ERR_VALUE, "[%s] At most 64 operands are supported.", fn);
        goto done;
    }
    P->steps = calloc((size_t)n, sizeof *P->steps);
    if (!P->steps) {
        mk_nomem();
        goto done;
    }
    if (n <= 2) {
        step *s = &P->steps[0];
        s->n = n;
        for (int i = 0; i < n; i++) {
            s->in[i] = in[i];
            s->pos[i] = i;
        }
        s->out = out;
        P->nsteps = 1;
        P->opt_cost = P->naive_cost;
        P->opt_scaling = P->naive_scaling;
    } else {
        if (greedy(P, n, in, &out, d, P->naive_cost, max_size) < 0) goto done;
        P->steps[P->nsteps - 1].out = out;
    }
    rc = 0;
done:
    if (rc < 0) {
        free(P->steps);
        P->steps = NULL;
    }
    free(str);
    free(in);
    return rc;
}

int mk_einsum_path(const char *subscripts, int n, mk_array *const *operands, int (**path)[2], int *npath,
                   char **report) {
    plan P;
    dims d;
    *path = NULL;
    *report = NULL;
    if (make_plan("einsum_path", subscripts, n, operands, &P, &d) < 0) return -1;
    /* a pair step as its two positions; a step over all k remaining
     * operands (positions 0..k-1) as (-1, k) */
    int (*p)[2] = malloc(sizeof *p * (size_t)(P.nsteps ? P.nsteps : 1));
    char *r = malloc(strlen(subscripts) + 512);
    if (!p || !r) {
        free(p);
        free(r);
        free(P.steps);
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < P.nsteps; i++) {
        /* positions of a step are 0..k-1 for naive steps, a pair otherwise */
        if (P.steps[i].n == 2) {
            p[i][0] = P.steps[i].pos[0];
            p[i][1] = P.steps[i].pos[1];
        } else {
            p[i][0] = -1;
            p[i][1] = P.steps[i].n;
        }
    }
    sprintf(r,
            "  Complete contraction:  %s\n         Naive scaling:  %d\n     Optimized scaling:  %d\n      Naive FLOP "
            "count:  %lld\n  Optimized FLOP count:  %lld\n",
            subscripts, P.naive_scaling, P.opt_scaling, (long long)P.naive_cost, (long long)P.opt_cost);
    *path = p;
    *npath = P.nsteps;
    *report = r;
    free(P.steps);
    return 0;
}

/* ------------------------------------------------------------- evaluation */

/* Replaces x (stolen) by its diagonals over repeated letters; x's subscript
 * loses the repeats (each repeated letter moves last). */
static mk_array *collapse(mk_array *x, sub *s) {
    for (;;) {
        int i = -1, j = -1;
        for (int a = 0; a < s->n && i < 0; a++)
            for (int b = a + 1; b < s->n; b++)
                if (s->s[a] == s->s[b]) {
                    i = a;
                    j = b;
                    break;
                }
        if (i < 0) return x;
        mk_array *y = mk_diagonal(x, 0, i, j);
        mk_decref(x);
        if (!y) return NULL;
        x = y;
        char c = s->s[i];
        int k = 0;
        for (int a = 0; a < s->n; a++)
            if (a != i && a != j) s->s[k++] = s->s[a];
        s->s[k++] = c;
        s->n = k;
    }
}

static int find(const sub *s, char c) {
    for (int i = 0; i < s->n; i++)
        if (s->s[i] == c) return i;
    return -1;
}

static bool has(uint64_t set, char c) { return set >> letter(c) & 1; }

static mk_array *transpose_to(mk_array *x, int n, const int *perm) {
    bool id = true;
    for (int i = 0; i < n; i++) id &= perm[i] == i;
    if (id) {
        mk_incref(x);
        return x;
    }
    return mk_transpose(x, n, perm);
}

/* a, b with subscripts sa, sb; out the step's output (a contraction). */
static mk_array *batch_dot(mk_array *a, mk_array *b, const sub *sa, const sub *sb, const sub *out) {
    int ac[SUBMAX], ab[SUBMAX], an[SUBMAX], bc[SUBMAX], bb[SUBMAX], bn[SUBMAX], nc = 0, nb = 0, nna = 0, nnb = 0;
    for (int i = 0; i < sa->n; i++) {
        char c = sa->s[i];
        if (!has(out->set, c))
            ac[nc++] = i;
        else if (has(sb->set, c))
            ab[nb++] = i;
        else
            an[nna++] = i;
    }
    for (int i = 0; i < nc; i++) bc[i] = find(sb, sa->s[ac[i]]);
    for (int i = 0; i < nb; i++) bb[i] = find(sb, sa->s[ab[i]]);
    for (int i = 0; i < sb->n; i++)
        if (has(out->set, sb->s[i]) && !has(sa->set, sb->s[i])) bn[nnb++] = i;
    int64_t ashape[MK_MAX_NDIM], bshape[MK_MAX_NDIM];
    memcpy(ashape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    memcpy(bshape, b->shape, sizeof(int64_t) * (size_t)b->ndim);
    for (int i = 0; i < nc; i++) {
        int64_t m = ashape[ac[i]] > bshape[bc[i]] ? ashape[ac[i]] : bshape[bc[i]];
        ashape[ac[i]] = bshape[bc[i]] = m;
    }
    for (int i = 0; i < nb; i++) {
        int64_t m = ashape[ab[i]] > bshape[bb[i]] ? ashape[ab[i]] : bshape[bb[i]];
        ashape[ab[i]] = bshape[bb[i]] = m;
    }
    mk_array *A = NULL, *B = NULL, *At = NULL, *Bt = NULL, *A2 = NULL, *B2 = NULL, *M = NULL, *r = NULL;
    if (!(A = mk_broadcast_to(a, a->ndim, ashape)) || !(B = mk_broadcast_to(b, b->ndim, bshape))) goto done;
    int pa[MK_MAX_NDIM], pb[MK_MAX_NDIM], k = 0;
    int64_t sa2[MK_MAX_NDIM], sb2[MK_MAX_NDIM], os[MK_MAX_NDIM], s1 = 1, s2 = 1, s3 = 1;
    int no = 0;
    for (int i = 0; i < nb; i++) pa[k++] = ab[i], sa2[i] = sb2[i] = ashape[ab[i]], os[no++] = ashape[ab[i]];
    for (int i = 0; i < nna; i++) pa[k++] = an[i], s1 *= ashape[an[i]], os[no++] = ashape[an[i]];
    for (int i = 0; i < nc; i++) pa[k++] = ac[i], s2 *= ashape[ac[i]];
    k = 0;
    for (int i = 0; i < nb; i++) pb[k++] = bb[i];
    for (int i = 0; i < nc; i++) pb[k++] = bc[i];
    for (int i = 0; i < nnb; i++) pb[k++] = bn[i], s3 *= bshape[bn[i]], os[no++] = bshape[bn[i]];
    sa2[nb] = s1;
    sa2[nb + 1] = s2;
    sb2[nb] = s2;
    sb2[nb + 1] = s3;
    if (!(At = transpose_to(A, a->ndim, pa)) || !(A2 = mk_reshape(At, nb + 2, sa2))) goto done;
    if (!(Bt = transpose_to(B, b->ndim, pb)) || !(B2 = mk_reshape(Bt, nb + 2, sb2))) goto done;
    if (!(M = mk_matmul(A2, B2))) goto done;
    mk_array *R = mk_reshape(M, no, os);
    if (!R) goto done;
    /* to the step's output order */
    char order[SUBMAX];
    int n = 0;
    for (int i = 0; i < nb; i++) order[n++] = sa->s[ab[i]];
    for (int i = 0; i < nna; i++) order[n++] = sa->s[an[i]];
    for (int i = 0; i < nnb; i++) order[n++] = sb->s[bn[i]];
    int perm[MK_MAX_NDIM];
    for (int i = 0; i < out->n; i++) perm[i] = (int)((char *)memchr(order, out->s[i], (size_t)n) - order);
    r = transpose_to(R, out->n, perm);
    mk_decref(R);
done:
    mk_xdecref(A);
    mk_xdecref(B);
    mk_xdecref(At);
    mk_xdecref(Bt);
    mk_xdecref(A2);
    mk_xdecref(B2);
    mk_xdecref(M);
    return r;
}

/* Broadcast multiply of the step's inputs over the union of their letters
 * (in order of first appearance), summed to the output. */
static mk_array *naive(int n, mk_array **ops, const sub *in, const sub *out) {
    char all[SUBMAX];
    int na = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < in[i].n; j++)
            if (!memchr(all, in[i].s[j], (size_t)na)) all[na++] = in[i].s[j];
    if (na > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[einsum] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    mk_array *acc = NULL;
    for (int i = 0; i < n; i++) {
        /* x's dims in the order of all[], size 1 where x lacks the letter */
        int perm[MK_MAX_NDIM];
        int64_t shape[MK_MAX_NDIM];
        for (int j = 0; j < in[i].n; j++) perm[j] = j;
        int k = 0;
        int order[MK_MAX_NDIM];
        for (int c = 0; c < na; c++) {
            int p = find(&in[i], all[c]);
            if (p >= 0) order[k++] = p;
        }
        mk_array *t = transpose_to(ops[i], in[i].n, order);
        if (!t) goto fail;
        for (int c = 0; c < na; c++) {
            int p = find(&in[i], all[c]);
            shape[c] = p >= 0 ? ops[i]->shape[p] : 1;
        }
        (void)perm;
        mk_array *r = mk_reshape(t, na, shape);
        mk_decref(t);
        if (!r) goto fail;
        if (!acc) {
            acc = r;
        } else {
            mk_array *m = mk_binary(MK_BINARY_multiply, acc, r);
            mk_decref(acc);
            mk_decref(r);
            if (!(acc = m)) return NULL;
        }
    }
    int axes[MK_MAX_NDIM], ns = 0;
    char kept[SUBMAX];
    int nk = 0;
    for (int c = 0; c < na; c++) {
        if (!has(out->set, all[c]))
            axes[ns++] = c;
        else
            kept[nk++] = all[c];
    }
    if (ns) {
        mk_array *s = mk_reduce(MK_REDUCE_SUM, acc, ns, axes, false);
        mk_decref(acc);
        if (!(acc = s)) return NULL;
    }
    int perm[MK_MAX_NDIM];
    for (int i = 0; i < out->n; i++) perm[i] = (int)((char *)memchr(kept, out->s[i], (size_t)nk) - kept);
    mk_array *r = transpose_to(acc, out->n, perm);
    mk_decref(acc);
    return r;
fail:
    mk_xdecref(acc);
    return NULL;
}

mk_array *mk_einsum(const char *subscripts, int n, mk_array *const *operands) {
    plan P;
    dims d;
    if (make_plan("einsum", subscripts, n, operands, &P, &d) < 0) return NULL;
    mk_array **ops = calloc((size_t)(n + 1), sizeof *ops), *res = NULL;
    int nops = n;
    if (!ops) {
        free(P.steps);
        return mk_nomem();
    }
    for (int i = 0; i < n; i++) {
        ops[i] = operands[i];
        mk_incref(ops[i]);
    }
    for (int si = 0; si < P.nsteps; si++) {
        step *s = &P.steps[si];
        mk_array *x[64];
        for (int i = 0; i < s->n; i++) {
            x[i] = ops[s->pos[i]];
            mk_incref(x[i]);
        }
        /* diagonals of repeated letters */
        for (int i = 0; i < s->n; i++)
            if (popcount(s->in[i].set) < s->in[i].n && !(x[i] = collapse(x[i], &s->in[i]))) goto step_fail;
        /* sum letters found in one input only */
        for (int i = 0; i < s->n; i++) {
            uint64_t others = s->out.set;
            for (int j = 0; j < s->n; j++)
                if (j != i) others |= s->in[j].set;
            int axes[SUBMAX], na = 0, k = 0;
            sub *t = &s->in[i];
            for (int a = 0; a < t->n; a++) {
                if (!has(others, t->s[a]))
                    axes[na++] = a;
                else
                    t->s[k++] = t->s[a];
            }
            if (!na) continue;
            t->n = k;
            sub_set(t);
            mk_array *y = mk_reduce(MK_REDUCE_SUM, x[i], na, axes, false);
            mk_decref(x[i]);
            if (!(x[i] = y)) goto step_fail;
        }
        bool dot = false;
        if (s->n == 2)
            for (int j = 0; j < s->in[0].n; j++) dot |= !has(s->out.set, s->in[0].s[j]);
        mk_array *r = dot ? batch_dot(x[0], x[1], &s->in[0], &s->in[1], &s->out) : naive(s->n, x, s->in, &s->out);
        for (int i = 0; i < s->n; i++) mk_decref(x[i]);
        if (!r) goto fail;
        /* drop the step's inputs (positions increase), append its result */
        for (int i = s->n - 1; i >= 0; i--) {
            mk_decref(ops[s->pos[i]]);
            memmove(ops + s->pos[i], ops + s->pos[i] + 1, sizeof *ops * (size_t)(nops - s->pos[i] - 1));
            nops--;
        }
        ops[nops++] = r;
        continue;
    step_fail:
        for (int i = 0; i < s->n; i++) mk_xdecref(x[i]);
        goto fail;
    }
    res = ops[0];
    ops[0] = NULL;
fail:
    for (int i = 0; i < nops; i++) mk_xdecref(ops[i]);
    free(ops);
    free(P.steps);
    return res;
}
