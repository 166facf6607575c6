/* File formats: .npy, .npz and safetensors (see io.h).
 *
 * Every reader works on the whole file in memory and checks each declared
 * length, count and offset against the bytes really there before it
 * allocates, so a truncated or hostile file raises an error instead of
 * reading past the end or asking for terabytes. */
#include "io.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "half.h"
#include "ops.h"

/* ------------------------------------------------------------- buffers */

int mk_bytes_put(mk_bytes *b, const void *p, size_t n) {
    if (n > SIZE_MAX - b->len) goto nomem;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) goto nomem;
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
nomem:
    mk_nomem();
    return -1;
}

void mk_bytes_free(mk_bytes *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int put_str(mk_bytes *b, const char *s) { return mk_bytes_put(b, s, strlen(s)); }

static int put_le(mk_bytes *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    return mk_bytes_put(b, t, (size_t)n);
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void mk_named_free(mk_named *d) {
    for (int i = 0; i < d->n; i++) {
        free(d->names[i]);
        mk_xdecref(d->arrays[i]);
    }
    for (int i = 0; i < d->nmeta; i++) {
        free(d->meta_keys[i]);
        free(d->meta_values[i]);
    }
    free(d->names);
    free(d->arrays);
    free(d->meta_keys);
    free(d->meta_values);
    memset(d, 0, sizeof *d);
}

/* Takes ownership of name and a (both freed on failure). */
static int named_add(mk_named *d, char *name, mk_array *a) {
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 8;
        char **nn = realloc(d->names, cap * sizeof *nn);
        if (nn) d->names = nn;
        mk_array **na = nn ? realloc(d->arrays, cap * sizeof *na) : NULL;
        if (!na) {
            free(name);
            mk_xdecref(a);
            mk_nomem();
            return -1;
        }
        d->arrays = na;
        d->cap = cap;
    }
    d->names[d->n] = name;
    d->arrays[d->n++] = a;
    return 0;
}

static int meta_add(mk_named *d, char *k, char *v) {
    if (d->nmeta == d->metacap) {
        int cap = d->metacap ? d->metacap * 2 : 8;
        char **nk = realloc(d->meta_keys, cap * sizeof *nk);
        if (nk) d->meta_keys = nk;
        char **nv = nk ? realloc(d->meta_values, cap * sizeof *nv) : NULL;
        if (!nv) {
            free(k);
            free(v);
            mk_nomem();
            return -1;
        }
        d->meta_values = nv;
        d->metacap = cap;
    }
    d->meta_keys[d->nmeta] = k;
    d->meta_values[d->nmeta++] = v;
    return 0;
}

/* Row-major bytes of an evaluated array appended to out. */
static int put_array_data(mk_bytes *out, const mk_array *a) {
    size_t nbytes = (size_t)a->size * mk_dtype_size(a->dtype);
    if (a->size == 0) return 0;
    if (a->flags & MK_ROW_CONTIG) return mk_bytes_put(out, mk_data(a), nbytes);
    if (mk_bytes_put(out, NULL, 0) < 0) return -1;
    size_t at = out->len;
    /* grow without copying, then fill in place */
    if (nbytes > out->cap - out->len) {
        size_t need = out->len + nbytes;
        uint8_t *d = realloc(out->data, need);
        if (!d) {
            mk_nomem();
            return -1;
        }
        out->data = d;
        out->cap = need;
    }
    int64_t strides[MK_MAX_NDIM];
    mk_row_strides(a->ndim, a->shape, strides);
    mk_copy_into(a, out->data + at, strides);
    out->len += nbytes;
    return 0;
}

/* ----------------------------------------------------------------- npy */

static const char NPY_MAGIC[] = "\x93NUMPY";

static const char *npy_descr(mk_dtype t) {
    switch (t) {
    case MK_BOOL: return "|b1";
    case MK_UINT8: return "|u1";
    case MK_UINT16: return "<u2";
    case MK_UINT32: return "<u4";
    case MK_UINT64: return "<u8";
    case MK_INT8: return "|i1";
    case MK_INT16: return "<i2";
    case MK_INT32: return "<i4";
    case MK_INT64: return "<i8";
    case MK_FLOAT16: return "<f2";
    case MK_FLOAT32: return "<f4";
    case MK_FLOAT64: return "<f8";
    case MK_BFLOAT16: return "<V2"; /* as MLX: NumPy has no bfloat16 */
    case MK_COMPLEX64: return "<c8";
    default: return NULL;
    }
}

/* descr ("<f4") to dtype; *swap: big-endian data. -1 if unsupported. */
static int npy_dtype(const char *d, size_t len, int *swap) {
    if (len < 3) return -1;
    char order = d[0];
    if (order != '<' && order != '>' && order != '|' && order != '=') return -1;
    char kind = d[1];
    int size = 0;
    for (size_t i = 2; i < len; i++) {
        if (d[i] < '0' || d[i] > '9' || size > 1000) return -1;
        size = size * 10 + (d[i] - '0');
    }
    *swap = order == '>' && size > 1;
    switch (kind) {
    case 'b': return size == 1 ? MK_BOOL : -1;
    case 'u': return size == 1 ? MK_UINT8 : size == 2 ? MK_UINT16 : size == 4 ? MK_UINT32 : size == 8 ? MK_UINT64 : -1;
    case 'i': return size == 1 ? MK_INT8 : size == 2 ? MK_INT16 : size == 4 ? MK_INT32 : size == 8 ? MK_INT64 : -1;
    case 'f': return size == 2 ? MK_FLOAT16 : size == 4 ? MK_FLOAT32 : size == 8 ? MK_FLOAT64 : -1;
    case 'c': return size == 8 ? MK_COMPLEX64 : -1;
    case 'V':
        *swap = 0;
        return size == 2 ? MK_BFLOAT16 : -1;
    default: return -1;
    }
}

static void byteswap(uint8_t *p, size_t nbytes, size_t width) {
    for (size_t i = 0; i + width <= nbytes; i += width)
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

static const char *skip_ws(const char *s, const char *e) {
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
    return s;
}

static mk_array *npy_bad_header(void) {
    mk_error_set(MK_ERR_RUNTIME, "[load] Invalid header in .npy file");
    return NULL;
}

/* A loaded array whose data could not be read: a node without inputs whose
 * evaluation raises the read error (MLX reads data lazily, on eval). */
static int load_error_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)in, (void)out;
    mk_error_set(MK_ERR_RUNTIME, "%s", (const char *)p->params);
    return -1;
}
static const mk_opdef load_error_def = {"Load", load_error_eval, NULL, NULL, NULL, NULL, true};

static mk_array *load_error_node(mk_dtype dtype, int ndim, const int64_t *shape, const char *msg) {
    char *m = strdup(msg);
    if (!m) {
        mk_nomem();
        return NULL;
    }
    return mk_node(&load_error_def, m, dtype, ndim, shape, 0, NULL);
}

/* The data of a .npy array into out (fresh row-contiguous storage): copied,
 * byte-swapped (swap: the width of the swapped units, 0 for none) and, for
 * Fortran order, transposed into row-major. 0, or -1 with the error set. */
static int npy_fill(mk_array *out, const uint8_t *data, size_t nbytes, size_t swap, bool fortran) {
    int ndim = out->ndim;
    if (fortran && ndim > 1) {
        int64_t rshape[MK_MAX_NDIM], rstr[MK_MAX_NDIM], dst[MK_MAX_NDIM];
        for (int i = 0; i < ndim; i++) rshape[i] = out->shape[ndim - 1 - i];
        mk_array *tmp = mk_array_empty(out->dtype, ndim, rshape);
        if (!tmp) return -1;
        if (nbytes) memcpy(mk_data(tmp), data, nbytes);
        if (swap) byteswap(mk_data(tmp), nbytes, swap);
        mk_row_strides(ndim, out->shape, rstr);
        for (int i = 0; i < ndim; i++) dst[i] = rstr[ndim - 1 - i];
        mk_copy_into(tmp, mk_data(out), dst);
        mk_decref(tmp);
        return 0;
    }
    if (nbytes) memcpy(mk_data(out), data, nbytes);
    if (swap) byteswap(mk_data(out), nbytes, swap);
    return 0;
}

mk_blob *mk_blob_new(size_t len) {
    mk_blob *b = malloc(sizeof *b + (len ? len : 1));
    if (!b) return mk_nomem();
    atomic_init(&b->refcnt, 1);
    b->len = len;
    return b;
}

void mk_blob_decref(mk_blob *b) {
    if (b && atomic_fetch_sub_explicit(&b->refcnt, 1, memory_order_acq_rel) == 1) free(b);
}

/* A .npy array read when evaluated, as MLX's Load: the node holds the file's
 * bytes, and its output is allocated only when it runs, so an op that uses a
 * loaded array held by nothing else can take over its buffer (donation). */
typedef struct {
    mk_blob *blob;
    size_t off, nbytes, swap;
    bool fortran;
} npy_load;

static int npy_load_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)in;
    const npy_load *l = p->params;
    if (mk_alloc_out(out[0]) < 0) return -1;
    return npy_fill(out[0], l->blob->data + l->off, l->nbytes, l->swap, l->fortran);
}

static void npy_load_free(void *params) {
    npy_load *l = params;
    if (l) mk_blob_decref(l->blob);
    free(l);
}

static const mk_opdef npy_load_def = {"Load", npy_load_eval, npy_load_free, NULL, NULL, NULL, true};

static mk_array *npy_read(const uint8_t *p, size_t n, size_t *used, mk_blob *lazy);

mk_array *mk_npy_read(const uint8_t *p, size_t n, size_t *used) { return npy_read(p, n, used, NULL); }

mk_array *mk_npy_read_lazy(mk_blob *file) { return npy_read(file->data, file->len, NULL, file); }

static mk_array *npy_read(const uint8_t *p, size_t n, size_t *used, mk_blob *lazy) {
    if (n < 10 || memcmp(p, NPY_MAGIC, 6) != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[load] Invalid header in .npy file: no NumPy magic string");
        return NULL;
    }
    int major = p[6];
    size_t hlen, start;
    if (major == 1) {
        hlen = (size_t)get_le(p + 8, 2);
        start = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12) return npy_bad_header();
        hlen = (size_t)get_le(p + 8, 4);
        start = 12;
    } else {
        mk_error_set(MK_ERR_RUNTIME, "[load] Unsupported .npy format version %d", major);
        return NULL;
    }
    if (hlen > n - start) {
        mk_error_set(MK_ERR_RUNTIME, "[load] Invalid header in .npy file: header of %zu bytes past the end of the file",
                     hlen);
        return NULL;
    }
    const char *s = (const char *)p + start, *e = s + hlen;
    int dtype = -1, swap = 0, fortran = -1, ndim = -1;
    int64_t shape[MK_MAX_NDIM];
    s = skip_ws(s, e);
    if (s >= e || *s++ != '{') return npy_bad_header();
    for (;;) {
        s = skip_ws(s, e);
        if (s < e && *s == '}') break;
        if (s >= e || (*s != '\'' && *s != '"')) return npy_bad_header();
        char q = *s++;
        const char *k = s;
        while (s < e && *s != q) s++;
        if (s >= e) return npy_bad_header();
        size_t klen = (size_t)(s - k);
        s = skip_ws(s + 1, e);
        if (s >= e || *s++ != ':') return npy_bad_header();
        s = skip_ws(s, e);
        if (klen == 5 && !memcmp(k, "descr", 5)) {
            if (s >= e || (*s != '\'' && *s != '"')) {
                mk_error_set(MK_ERR_RUNTIME, "[load] Unsupported .npy dtype (structured arrays are not supported)");
                return NULL;
            }
            q = *s++;
            const char *d = s;
            while (s < e && *s != q) s++;
            if (s >= e) return npy_bad_header();
            dtype = npy_dtype(d, (size_t)(s - d), &swap);
            if (dtype < 0) {
                mk_error_set(MK_ERR_RUNTIME, "[load] Unsupported .npy dtype '%.*s'", (int)(s - d < 32 ? s - d : 32), d);
                return NULL;
            }
            s++;
        } else if (klen == 13 && !memcmp(k, "fortran_order", 13)) {
            if (e - s >= 4 && !memcmp(s, "True", 4)) fortran = 1, s += 4;
            else if (e - s >= 5 && !memcmp(s, "False", 5)) fortran = 0, s += 5;
            else return npy_bad_header();
        } else if (klen == 5 && !memcmp(k, "shape", 5)) {
            if (s >= e || *s++ != '(') return npy_bad_header();
            ndim = 0;
            for (;;) {
                s = skip_ws(s, e);
                if (s < e && *s == ')') break;
                if (s >= e || *s < '0' || *s > '9') return npy_bad_header();
                int64_t v = 0;
                while (s < e && *s >= '0' && *s <= '9') {
                    if (v > (INT64_MAX - 9) / 10) return npy_bad_header();
                    v = v * 10 + (*s++ - '0');
                }
                if (ndim == MK_MAX_NDIM) {
                    mk_error_set(MK_ERR_RUNTIME, "[load] .npy array has more than %d dimensions", MK_MAX_NDIM);
                    return NULL;
                }
                shape[ndim++] = v;
                s = skip_ws(s, e);
                if (s < e && *s == ',') s++;
            }
            s++;
        } else {
            return npy_bad_header();
        }
        s = skip_ws(s, e);
        if (s < e && *s == ',') s++;
    }
    if (dtype < 0 || fortran < 0 || ndim < 0) return npy_bad_header();
    int64_t size = mk_shape_size(ndim, shape);
    if (size < 0) return NULL;
    size_t isz = mk_dtype_size((mk_dtype)dtype), avail = n - start - hlen;
    if ((uint64_t)size > avail / isz) {
        /* As MLX: the header is read now, the data when the array is
         * evaluated, so missing data is a RuntimeError at eval time. */
        char msg[160];
        snprintf(msg, sizeof msg, "[load] .npy file is truncated: %lld elements of %zu bytes need more bytes, %zu present",
                 (long long)size, isz, avail);
        if (used) *used = n;
        return load_error_node((mk_dtype)dtype, ndim, shape, msg);
    }
    size_t nbytes = (size_t)size * isz;
    const uint8_t *data = p + start + hlen;
    if (used) *used = start + hlen + nbytes;
    size_t swap_w = swap ? (dtype == MK_COMPLEX64 ? 4 : isz) : 0;
    if (lazy) {
        npy_load *l = malloc(sizeof *l);
        if (!l) return mk_nomem();
        atomic_fetch_add_explicit(&lazy->refcnt, 1, memory_order_relaxed);
        *l = (npy_load){lazy, (size_t)(data - lazy->data), nbytes, swap_w, fortran != 0};
        return mk_node(&npy_load_def, l, (mk_dtype)dtype, ndim, shape, 0, NULL);
    }
    mk_array *out = mk_array_empty((mk_dtype)dtype, ndim, shape);
    if (!out) return NULL;
    if (npy_fill(out, data, nbytes, swap_w, fortran != 0) < 0) {
        mk_decref(out);
        return NULL;
    }
    return out;
}

int mk_npy_write(mk_bytes *out, const mk_array *a) {
    char head[64 + MK_MAX_NDIM * 24];
    int len = snprintf(head, sizeof head, "{'descr': '%s', 'fortran_order': False, 'shape': (", npy_descr(a->dtype));
    for (int i = 0; i < a->ndim; i++)
        len += snprintf(head + len, sizeof head - (size_t)len, "%lld,%s", (long long)a->shape[i],
                        i + 1 < a->ndim ? " " : "");
    if (a->ndim > 1) len--; /* "(2, 3)" but "(3,)" */
    len += snprintf(head + len, sizeof head - (size_t)len, "), }");
    /* pad with spaces so that the data starts at a multiple of 64 */
    size_t total = 10 + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)len + pad + 1;
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hlen & 0xff), (uint8_t)(hlen >> 8)};
    if (mk_bytes_put(out, pre, 10) < 0 || mk_bytes_put(out, head, (size_t)len) < 0) return -1;
    for (size_t i = 0; i < pad; i++)
        if (mk_bytes_put(out, " ", 1) < 0) return -1;
    if (mk_bytes_put(out, "\n", 1) < 0) return -1;
    return put_array_data(out, a);
}

/* ----------------------------------------------------------------- npz */

static int zip_bad(const char *what) {
    mk_error_set(MK_ERR_VALUE, "[load_npz] Invalid zip file: %s", what);
    return -1;
}

/* Inflates or copies one member into a fresh buffer (*out, *outlen). */
static int zip_member(const uint8_t *data, size_t csize, size_t usize, int method, uint32_t crc, uint8_t **out) {
    if (method == 0 && csize != usize) return zip_bad("stored member with differing sizes");
    if (method != 0 && method != 8) {
        mk_error_set(MK_ERR_VALUE, "[load_npz] Unsupported zip compression method %d", method);
        return -1;
    }
    /* deflate expands at most about 1032:1; a larger declared size is a lie */
    if (method == 8 && usize / 1032 > csize + 1) return zip_bad("declared size too large for its compressed data");
    uint8_t *buf = malloc(usize ? usize : 1);
    if (!buf) {
        mk_nomem();
        return -1;
    }
    if (method == 0) {
        if (usize) memcpy(buf, data, usize);
    } else {
        z_stream z;
        memset(&z, 0, sizeof z);
        if (inflateInit2(&z, -15) != Z_OK) {
            free(buf);
            return zip_bad("zlib initialisation failed");
        }
        size_t in_left = csize, out_left = usize;
        z.next_in = (Bytef *)data;
        z.next_out = buf;
        int rc = Z_OK;
        while (rc == Z_OK) {
            uInt ci = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            uInt co = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
            z.avail_in = ci;
            z.avail_out = co;
            rc = inflate(&z, Z_NO_FLUSH);
            in_left -= ci - z.avail_in;
            out_left -= co - z.avail_out;
            if (rc == Z_OK && ci == z.avail_in && co == z.avail_out) rc = Z_BUF_ERROR;
        }
        inflateEnd(&z);
        if (rc != Z_STREAM_END || out_left != 0) {
            free(buf);
            return zip_bad("corrupt deflate data");
        }
    }
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < usize;) {
        uInt chunk = usize - off > (1u << 30) ? (1u << 30) : (uInt)(usize - off);
        c = crc32(c, buf + off, chunk);
        off += chunk;
    }
    if ((uint32_t)c != crc) {
        free(buf);
        return zip_bad("CRC mismatch");
    }
    *out = buf;
    return 0;
}

int mk_npz_read(const uint8_t *p, size_t n, mk_named *out) {
    memset(out, 0, sizeof *out);
    if (n < 22) return zip_bad("too short");
    size_t eocd = (size_t)-1;
    size_t lo = n > 22 + 65535 ? n - 22 - 65535 : 0;
    for (size_t i = n - 22 + 1; i-- > lo;)
        if (get_le(p + i, 4) == 0x06054b50) {
            eocd = i;
            break;
        }
    if (eocd == (size_t)-1) return zip_bad("no end of central directory");
    uint64_t count = get_le(p + eocd + 10, 2), cdsize = get_le(p + eocd + 12, 4), cdoff = get_le(p + eocd + 16, 4);
    if (count == 0xffff || cdsize == 0xffffffff || cdoff == 0xffffffff) {
        if (eocd < 20 || get_le(p + eocd - 20, 4) != 0x07064b50) return zip_bad("missing zip64 locator");
        uint64_t z64 = get_le(p + eocd - 20 + 8, 8);
        if (z64 > n || n - z64 < 56 || get_le(p + z64, 4) != 0x06064b50) return zip_bad("bad zip64 record");
        count = get_le(p + z64 + 32, 8);
        cdsize = get_le(p + z64 + 40, 8);
        cdoff = get_le(p + z64 + 48, 8);
    }
    if (cdoff > n || cdsize > n - cdoff) return zip_bad("central directory out of range");
    if (count > cdsize / 46) return zip_bad("entry count larger than the central directory");
    size_t at = (size_t)cdoff, end = (size_t)(cdoff + cdsize);
    for (uint64_t i = 0; i < count; i++) {
        if (end - at < 46 || get_le(p + at, 4) != 0x02014b50) goto bad_cd;
        int method = (int)get_le(p + at + 10, 2);
        uint32_t crc = (uint32_t)get_le(p + at + 16, 4);
        uint64_t csize = get_le(p + at + 20, 4), usize = get_le(p + at + 24, 4);
        size_t nl = (size_t)get_le(p + at + 28, 2), el = (size_t)get_le(p + at + 30, 2), cl = (size_t)get_le(p + at + 32, 2);
        uint64_t loff = get_le(p + at + 42, 4);
        if (end - at - 46 < nl + el + cl) goto bad_cd;
        const uint8_t *name = p + at + 46, *ex = name + nl, *exend = ex + el;
        while (exend - ex >= 4) { /* zip64 extra field */
            unsigned id = (unsigned)get_le(ex, 2), sz = (unsigned)get_le(ex + 2, 2);
            if ((size_t)(exend - ex - 4) < sz) break;
            if (id == 1) {
                const uint8_t *f = ex + 4, *fe = f + sz;
                if (usize == 0xffffffff && fe - f >= 8) usize = get_le(f, 8), f += 8;
                if (csize == 0xffffffff && fe - f >= 8) csize = get_le(f, 8), f += 8;
                if (loff == 0xffffffff && fe - f >= 8) loff = get_le(f, 8), f += 8;
            }
            ex += 4 + sz;
        }
        at += 46 + nl + el + cl;
        if (loff > n || n - loff < 30 || get_le(p + loff, 4) != 0x04034b50) return zip_bad("bad local header");
        size_t dataoff = (size_t)loff + 30 + (size_t)get_le(p + loff + 26, 2) + (size_t)get_le(p + loff + 28, 2);
        if (dataoff > n || csize > n - dataoff) return zip_bad("member data past the end of the file");
        if (usize > SIZE_MAX / 2) return zip_bad("member too large");
        uint8_t *raw;
        if (zip_member(p + dataoff, (size_t)csize, (size_t)usize, method, crc, &raw) < 0) goto error;
        mk_array *a = mk_npy_read(raw, (size_t)usize, NULL);
        free(raw);
        if (!a) goto error;
        size_t kl = nl >= 4 && !memcmp(name + nl - 4, ".npy", 4) ? nl - 4 : nl;
        char *key = malloc(kl + 1);
        if (!key) {
            mk_decref(a);
            mk_nomem();
            goto error;
        }
        memcpy(key, name, kl);
        key[kl] = 0;
        if (named_add(out, key, a) < 0) goto error;
    }
    return 0;
bad_cd:
    zip_bad("corrupt central directory");
error:
    mk_named_free(out);
    return -1;
}

int mk_npz_write(mk_bytes *out, int n, const char *const *names, mk_array *const *arrays, int compress) {
    mk_bytes cd = {0}, npy = {0}, def = {0};
    for (int i = 0; i < n; i++) {
        npy.len = 0;
        if (mk_npy_write(&npy, arrays[i]) < 0) goto error;
        uLong crc = crc32(0L, Z_NULL, 0);
        for (size_t off = 0; off < npy.len;) {
            uInt chunk = npy.len - off > (1u << 30) ? (1u << 30) : (uInt)(npy.len - off);
            crc = crc32(crc, npy.data + off, chunk);
            off += chunk;
        }
        const uint8_t *body = npy.data;
        size_t blen = npy.len;
        if (compress) {
            z_stream z;
            memset(&z, 0, sizeof z);
            if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
                mk_error_set(MK_ERR_RUNTIME, "[savez_compressed] zlib initialisation failed");
                goto error;
            }
            def.len = 0;
            size_t in_left = npy.len;
            z.next_in = npy.data;
            int rc = Z_OK;
            while (rc != Z_STREAM_END) {
                uint8_t chunk[1 << 16];
                uInt ci = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
                z.avail_in = ci;
                z.next_out = chunk;
                z.avail_out = sizeof chunk;
                rc = deflate(&z, ci == in_left ? Z_FINISH : Z_NO_FLUSH);
                in_left -= ci - z.avail_in;
                if ((rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) ||
                    mk_bytes_put(&def, chunk, sizeof chunk - z.avail_out) < 0) {
                    deflateEnd(&z);
                    if (mk_error_code() == MK_OK) mk_error_set(MK_ERR_RUNTIME, "[savez_compressed] deflate failed");
                    goto error;
                }
            }
            deflateEnd(&z);
            body = def.data;
            blen = def.len;
        }
        size_t nl = strlen(names[i]) + 4;
        if (out->len > 0xfffffffeu || blen > 0xfffffffeu || npy.len > 0xfffffffeu || nl > 0xffff || n > 0xfffe) {
            mk_error_set(MK_ERR_VALUE, "[savez] Archives of 4 GB or more (zip64) are not supported");
            goto error;
        }
        size_t loff = out->len;
        /* local header: version 20, no flags, fixed 1980-01-01 time stamp */
        if (put_le(out, 0x04034b50, 4) < 0 || put_le(out, 20, 2) < 0 || put_le(out, 0, 2) < 0 ||
            put_le(out, compress ? 8 : 0, 2) < 0 || put_le(out, 0, 2) < 0 || put_le(out, 0x21, 2) < 0 ||
            put_le(out, crc, 4) < 0 || put_le(out, blen, 4) < 0 || put_le(out, npy.len, 4) < 0 ||
            put_le(out, nl, 2) < 0 || put_le(out, 0, 2) < 0 || put_str(out, names[i]) < 0 || put_str(out, ".npy") < 0 ||
            mk_bytes_put(out, body, blen) < 0)
            goto error;
        if (put_le(&cd, 0x02014b50, 4) < 0 || put_le(&cd, 20, 2) < 0 || put_le(&cd, 20, 2) < 0 || put_le(&cd, 0, 2) < 0 ||
            put_le(&cd, compress ? 8 : 0, 2) < 0 || put_le(&cd, 0, 2) < 0 || put_le(&cd, 0x21, 2) < 0 ||
            put_le(&cd, crc, 4) < 0 || put_le(&cd, blen, 4) < 0 || put_le(&cd, npy.len, 4) < 0 ||
            put_le(&cd, nl, 2) < 0 || put_le(&cd, 0, 2) < 0 || put_le(&cd, 0, 2) < 0 || put_le(&cd, 0, 2) < 0 ||
            put_le(&cd, 0, 2) < 0 || put_le(&cd, 0x1a4u << 16, 4) < 0 || put_le(&cd, loff, 4) < 0 ||
            put_str(&cd, names[i]) < 0 || put_str(&cd, ".npy") < 0)
            goto error;
    }
    size_t cdoff = out->len;
    if (cdoff > 0xfffffffeu || cd.len > 0xfffffffeu) {
        mk_error_set(MK_ERR_VALUE, "[savez] Archives of 4 GB or more (zip64) are not supported");
        goto error;
    }
    if (mk_bytes_put(out, cd.data, cd.len) < 0 || put_le(out, 0x06054b50, 4) < 0 || put_le(out, 0, 4) < 0 ||
        put_le(out, (uint64_t)n, 2) < 0 || put_le(out, (uint64_t)n, 2) < 0 || put_le(out, cd.len, 4) < 0 ||
        put_le(out, cdoff, 4) < 0 || put_le(out, 0, 2) < 0)
        goto error;
    mk_bytes_free(&cd);
    mk_bytes_free(&npy);
    mk_bytes_free(&def);
    return 0;
error:
    mk_bytes_free(&cd);
    mk_bytes_free(&npy);
    mk_bytes_free(&def);
    return -1;
}

/* --------------------------------------------------------- safetensors */

static const char *const ST_NAMES[MK_NDTYPES] = {
    [MK_BOOL] = "BOOL", [MK_UINT8] = "U8",   [MK_UINT16] = "U16",   [MK_UINT32] = "U32",    [MK_UINT64] = "U64",
    [MK_INT8] = "I8",   [MK_INT16] = "I16",  [MK_INT32] = "I32",    [MK_INT64] = "I64",     [MK_FLOAT16] = "F16",
    [MK_FLOAT32] = "F32", [MK_FLOAT64] = "F64", [MK_BFLOAT16] = "BF16", [MK_COMPLEX64] = "C64",
};

typedef struct {
    const char *s, *e;
} jp;

static int st_bad(const char *what) {
    mk_error_set(MK_ERR_RUNTIME, "[load_safetensors] Invalid safetensors file: %s", what);
    return -1;
}

static void jws(jp *j) { j->s = skip_ws(j->s, j->e); }

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int read_hex4(jp *j, unsigned *u) {
    if (j->e - j->s < 4) return -1;
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(j->s[i]);
        if (h < 0) return -1;
        *u = *u * 16 + (unsigned)h;
    }
    j->s += 4;
    return 0;
}

/* A JSON string as a fresh UTF-8 C string (NULL on error, message set). */
static char *jstring(jp *j) {
    jws(j);
    if (j->s >= j->e || *j->s != '"') {
        st_bad("expected a JSON string");
        return NULL;
    }
    j->s++;
    const char *q = j->s;
    while (q < j->e && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= j->e) {
        st_bad("unterminated JSON string");
        return NULL;
    }
    char *out = malloc((size_t)(q - j->s) + 1), *o = out;
    if (!out) return mk_nomem();
    while (*j->s != '"') {
        char c = *j->s++;
        if ((unsigned char)c < 0x20) goto bad;
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        c = *j->s++;
        switch (c) {
        case '"': case '\\': case '/': *o++ = c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (read_hex4(j, &u) < 0) goto bad;
            if (u >= 0xd800 && u < 0xdc00 && j->e - j->s >= 6 && j->s[0] == '\\' && j->s[1] == 'u') {
                j->s += 2;
                if (read_hex4(j, &lo) < 0 || lo < 0xdc00 || lo >= 0xe000) goto bad;
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            } else if (u >= 0xd800 && u < 0xe000) {
                goto bad;
            }
            /* at most 4 bytes, never more than the 6 escape characters read */
            if (u < 0x80) *o++ = (char)u;
            else if (u < 0x800) *o++ = (char)(0xc0 | u >> 6), *o++ = (char)(0x80 | (u & 63));
            else if (u < 0x10000)
                *o++ = (char)(0xe0 | u >> 12), *o++ = (char)(0x80 | ((u >> 6) & 63)), *o++ = (char)(0x80 | (u & 63));
            else
                *o++ = (char)(0xf0 | u >> 18), *o++ = (char)(0x80 | ((u >> 12) & 63)),
                *o++ = (char)(0x80 | ((u >> 6) & 63)), *o++ = (char)(0x80 | (u & 63));
            break;
        }
        default: goto bad;
        }
        if (j->s > q) goto bad;
    }
    j->s++;
    *o = 0;
    return out;
bad:
    free(out);
    st_bad("bad JSON string escape");
    return NULL;
}

static int jexpect(jp *j, char c) {
    jws(j);
    if (j->s >= j->e || *j->s != c) {
        char msg[40];
        snprintf(msg, sizeof msg, "expected '%c' in the JSON header", c);
        return st_bad(msg);
    }
    j->s++;
    return 0;
}

/* Skips any JSON value (nesting bounded). */
static int jskip(jp *j, int depth) {
    jws(j);
    if (depth > 64) return st_bad("JSON header nested too deeply");
    if (j->s >= j->e) return st_bad("truncated JSON header");
    char c = *j->s;
    if (c == '"') {
        char *s = jstring(j);
        free(s);
        return s ? 0 : -1;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->s++;
        jws(j);
        if (j->s < j->e && *j->s == close) return j->s++, 0;
        for (;;) {
            if (c == '{') {
                char *k = jstring(j);
                if (!k) return -1;
                free(k);
                if (jexpect(j, ':') < 0) return -1;
            }
            if (jskip(j, depth + 1) < 0) return -1;
            jws(j);
            if (j->s < j->e && *j->s == ',') {
                j->s++;
                continue;
            }
            return jexpect(j, close);
        }
    }
    const char *st = j->s;
    while (j->s < j->e && (strchr("+-.eE", *j->s) || (*j->s >= '0' && *j->s <= '9') || (*j->s >= 'a' && *j->s <= 'z')))
        j->s++;
    return j->s > st ? 0 : st_bad("bad JSON value");
}

/* A non-negative JSON integer. */
static int juint(jp *j, uint64_t *v) {
    jws(j);
    if (j->s >= j->e || *j->s < '0' || *j->s > '9') return st_bad("expected a non-negative integer");
    *v = 0;
    while (j->s < j->e && *j->s >= '0' && *j->s <= '9') {
        if (*v > (UINT64_MAX - 9) / 10) return st_bad("integer too large");
        *v = *v * 10 + (uint64_t)(*j->s++ - '0');
    }
    return 0;
}

/* [a, b, ...] of at most max non-negative integers. */
static int juint_list(jp *j, uint64_t *v, int max, int *count) {
    if (jexpect(j, '[') < 0) return -1;
    *count = 0;
    jws(j);
    if (j->s < j->e && *j->s == ']') return j->s++, 0;
    for (;;) {
        if (*count == max) return st_bad("too many values in a list");
        if (juint(j, &v[(*count)++]) < 0) return -1;
        jws(j);
        if (j->s < j->e && *j->s == ',') {
            j->s++;
            continue;
        }
        return jexpect(j, ']');
    }
}

static int st_tensor(jp *j, const uint8_t *base, size_t avail, char *name, mk_named *out) {
    int dtype = -1, ndim = -1, noff = -1;
    uint64_t shape[MK_MAX_NDIM], off[2];
    if (jexpect(j, '{') < 0) goto error;
    jws(j);
    if (j->s < j->e && *j->s == '}') j->s++;
    else
        for (;;) {
            char *k = jstring(j);
            if (!k) goto error;
            if (jexpect(j, ':') < 0) {
                free(k);
                goto error;
            }
            int rc = 0;
            if (!strcmp(k, "dtype")) {
                char *d = jstring(j);
                if (!d) rc = -1;
                for (int t = 0; d && t < MK_NDTYPES; t++)
                    if (!strcmp(d, ST_NAMES[t])) dtype = t;
                /* fp8 tensors load as their bytes (uint8), as in MLX; from_fp8 decodes */
                if (d && (!strcmp(d, "F8_E4M3") || !strcmp(d, "F8_E8M0"))) dtype = MK_UINT8;
                if (d && dtype < 0) {
                    mk_error_set(MK_ERR_RUNTIME, "[safetensor] unsupported dtype %.32s", d);
                    rc = -1;
                }
                free(d);
            } else if (!strcmp(k, "shape")) {
                rc = juint_list(j, shape, MK_MAX_NDIM, &ndim);
            } else if (!strcmp(k, "data_offsets")) {
                rc = juint_list(j, off, 2, &noff);
            } else {
                rc = jskip(j, 1);
            }
            free(k);
            if (rc < 0) goto error;
            jws(j);
            if (j->s < j->e && *j->s == ',') {
                j->s++;
                continue;
            }
            if (jexpect(j, '}') < 0) goto error;
            break;
        }
    if (dtype < 0 || ndim < 0 || noff != 2) {
        st_bad("a tensor lacks dtype, shape or data_offsets");
        goto error;
    }
    int64_t sh[MK_MAX_NDIM];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] > INT64_MAX) {
            st_bad("dimension too large");
            goto error;
        }
        sh[i] = (int64_t)shape[i];
    }
    int64_t size = mk_shape_size(ndim, sh);
    if (size < 0) goto error;
    size_t isz = mk_dtype_size((mk_dtype)dtype);
    if (off[0] > off[1] || off[1] > avail) {
        mk_error_set(MK_ERR_RUNTIME, "[load_safetensors] Tensor '%.200s' has data offsets out of range", name);
        goto error;
    }
    if ((uint64_t)size > avail / isz || off[1] - off[0] != (uint64_t)size * isz) {
        mk_error_set(MK_ERR_RUNTIME, "[load_safetensors] Tensor '%.200s': data_offsets do not match its shape and dtype",
                     name);
        goto error;
    }
    mk_array *a = mk_array_empty((mk_dtype)dtype, ndim, sh);
    if (!a) goto error;
    if (size) memcpy(mk_data(a), base + off[0], (size_t)(off[1] - off[0]));
    return named_add(out, name, a);
error:
    free(name);
    return -1;
}

int mk_safetensors_read(const uint8_t *p, size_t n, mk_named *out) {
    memset(out, 0, sizeof *out);
    if (n < 8) return st_bad("shorter than its 8-byte header size");
    uint64_t hl = get_le(p, 8);
    /* MLX's (and the Rust reference's) limit on the JSON header */
    if (hl == 0 || hl >= 100000000) {
        mk_error_set(MK_ERR_RUNTIME, "[load_safetensors] Invalid json header length");
        return -1;
    }
    if (hl > n - 8) return st_bad("header size past the end of the file");
    jp j = {(const char *)p + 8, (const char *)p + 8 + hl};
    const uint8_t *base = p + 8 + hl;
    size_t avail = n - 8 - (size_t)hl;
    if (jexpect(&j, '{') < 0) goto error;
    jws(&j);
    if (j.s < j.e && *j.s == '}') j.s++;
    else
        for (;;) {
            char *k = jstring(&j);
            if (!k) goto error;
            if (jexpect(&j, ':') < 0) {
                free(k);
                goto error;
            }
            if (!strcmp(k, "__metadata__")) {
                free(k);
                /* MLX's save_safetensors writes null when there is no metadata; an object holds
                   string values (MLX's and the reference loaders refuse any other value) */
                jws(&j);
                if (j.e - j.s >= 4 && !memcmp(j.s, "null", 4)) {
                    j.s += 4;
                } else if (j.s < j.e && *j.s != '{') {
                    st_bad("__metadata__ is neither an object nor null");
                    goto error;
                } else if (jexpect(&j, '{') < 0) {
                    goto error;
                } else if (jws(&j), j.s < j.e && *j.s == '}') {
                    j.s++;
                } else
                    for (;;) {
                        char *mk = jstring(&j), *mv = NULL;
                        if (!mk || jexpect(&j, ':') < 0) {
                            free(mk);
                            goto error;
                        }
                        jws(&j);
                        if (j.s < j.e && *j.s != '"') {
                            mk_error_set(MK_ERR_RUNTIME,
                                         "[load_safetensors] __metadata__ entry '%.200s' is not a string", mk);
                            free(mk);
                            goto error;
                        }
                        if (!(mv = jstring(&j))) {
                            free(mk);
                            goto error;
                        }
                        if (meta_add(out, mk, mv) < 0) goto error;
                        jws(&j);
                        if (j.s < j.e && *j.s == ',') {
                            j.s++;
                            continue;
                        }
                        if (jexpect(&j, '}') < 0) goto error;
                        break;
                    }
            } else if (st_tensor(&j, base, avail, k, out) < 0) {
                goto error;
            }
            jws(&j);
            if (j.s < j.e && *j.s == ',') {
                j.s++;
                continue;
            }
            if (jexpect(&j, '}') < 0) goto error;
            break;
        }
    jws(&j);
    if (j.s != j.e) {
        st_bad("trailing bytes after the JSON header");
        goto error;
    }
    return 0;
error:
    mk_named_free(out);
    return -1;
}

static int put_jstring(mk_bytes *b, const char *s) {
    if (put_str(b, "\"") < 0) return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
            if (put_str(b, esc) < 0) return -1;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            if (put_str(b, esc) < 0) return -1;
        } else if (mk_bytes_put(b, &c, 1) < 0) {
            return -1;
        }
    }
    return put_str(b, "\"");
}

int mk_safetensors_write(mk_bytes *out, int n, const char *const *names, mk_array *const *arrays, int nmeta,
                         const char *const *meta_keys, const char *const *meta_values) {
    mk_bytes h = {0};
    char num[64];
    if (put_str(&h, "{") < 0) goto error;
    if (nmeta) {
        if (put_str(&h, "\"__metadata__\":{") < 0) goto error;
        for (int i = 0; i < nmeta; i++)
            if ((i && put_str(&h, ",") < 0) || put_jstring(&h, meta_keys[i]) < 0 || put_str(&h, ":") < 0 ||
                put_jstring(&h, meta_values[i]) < 0)
                goto error;
        if (put_str(&h, "}") < 0) goto error;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const mk_array *a = arrays[i];
        if (!strcmp(names[i], "__metadata__")) {
            mk_error_set(MK_ERR_VALUE, "[save_safetensors] The name __metadata__ is reserved");
            goto error;
        }
        if (((nmeta || i) && put_str(&h, ",") < 0) || put_jstring(&h, names[i]) < 0 || put_str(&h, ":{\"dtype\":\"") < 0 ||
            put_str(&h, ST_NAMES[a->dtype]) < 0 || put_str(&h, "\",\"shape\":[") < 0)
            goto error;
        for (int d = 0; d < a->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)a->shape[d]);
            if (put_str(&h, num) < 0) goto error;
        }
        uint64_t nb = (uint64_t)a->size * mk_dtype_size(a->dtype);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nb));
        if (put_str(&h, num) < 0) goto error;
        off += nb;
    }
    if (put_str(&h, "}") < 0) goto error;
    while (h.len % 8)
        if (put_str(&h, " ") < 0) goto error;
    if (put_le(out, h.len, 8) < 0 || mk_bytes_put(out, h.data, h.len) < 0) goto error;
    for (int i = 0; i < n; i++)
        if (put_array_data(out, arrays[i]) < 0) goto error;
    mk_bytes_free(&h);
    return 0;
error:
    mk_bytes_free(&h);
    return -1;
}

/* ---------------------------------------------------------------- GGUF */

enum { G_U8, G_I8, G_U16, G_I16, G_U32, G_I32, G_F32, G_BOOL, G_STR, G_ARR, G_U64, G_I64, G_F64 };

static int gguf_bad(const char *what) {
    mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Invalid GGUF file: %s", what);
    return -1;
}

/* value type -> dtype and size (strings and arrays: -1) */
static int gguf_value_dtype(unsigned t, size_t *sz) {
    static const int dt[] = {MK_UINT8, MK_INT8, MK_UINT16, MK_INT16, MK_UINT32, MK_INT32, MK_FLOAT32, MK_BOOL,
                             -1,       -1,      MK_UINT64, MK_INT64, MK_FLOAT64};
    static const size_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t > G_F64 || dt[t] < 0) return -1;
    *sz = size[t];
    return dt[t];
}

static int gguf_tensor_dtype(unsigned t) {
    switch (t) {
    case 0: return MK_FLOAT32;
    case 1: return MK_FLOAT16;
    case 24: return MK_INT8;
    case 25: return MK_INT16;
    case 26: return MK_INT32;
    default: return -1;
    }
}

static int gguf_tensor_type(mk_dtype t) {
    switch (t) {
    case MK_FLOAT32: return 0;
    case MK_FLOAT16: return 1;
    case MK_INT8: return 24;
    case MK_INT16: return 25;
    case MK_INT32: return 26;
    default: return -1;
    }
}

typedef struct {
    const uint8_t *p;
    size_t n, at;
} gr;

static int gr_u(gr *r, int nb, uint64_t *v) {
    if (r->n - r->at < (size_t)nb) return gguf_bad("truncated");
    *v = get_le(r->p + r->at, nb);
    r->at += (size_t)nb;
    return 0;
}

static char *gr_str(gr *r) {
    uint64_t len;
    if (gr_u(r, 8, &len) < 0) return NULL;
    if (len > r->n - r->at) {
        gguf_bad("string past the end of the file");
        return NULL;
    }
    char *s = malloc((size_t)len + 1);
    if (!s) return mk_nomem();
    memcpy(s, r->p + r->at, (size_t)len);
    s[len] = 0;
    r->at += (size_t)len;
    return s;
}

/* A scalar (ndim 0) or 1-d array of count values of type t, stored as MLX does (f64 -> float32). */
static mk_array *gr_values(gr *r, unsigned t, uint64_t count, int ndim) {
    size_t sz;
    int dt = gguf_value_dtype(t, &sz);
    if (dt < 0) {
        gguf_bad("unexpected value type");
        return NULL;
    }
    if (count > (r->n - r->at) / sz) {
        gguf_bad("array past the end of the file");
        return NULL;
    }
    int64_t shape[1] = {(int64_t)count};
    mk_array *a = mk_array_empty((mk_dtype)dt, ndim, shape);
    if (!a) return NULL;
    if (count) memcpy(mk_data(a), r->p + r->at, (size_t)count * sz);
    r->at += (size_t)count * sz;
    if (dt == MK_BOOL) /* normalise bytes to 0/1 */
        for (uint64_t i = 0; i < count; i++) ((uint8_t *)mk_data(a))[i] = ((uint8_t *)mk_data(a))[i] != 0;
    if (dt == MK_FLOAT64) {
        mk_array *f = mk_astype(a, MK_FLOAT32);
        mk_decref(a);
        if (!f || mk_eval1(f) < 0) {
            mk_xdecref(f);
            return NULL;
        }
        a = f;
    }
    return a;
}

void mk_gguf_kvs_free(mk_gguf_kv *kv, int n) {
    for (int i = 0; kv && i < n; i++) {
        free(kv[i].key);
        free(kv[i].str);
        for (int64_t j = 0; j < kv[i].nstrs; j++) free(kv[i].strs[j]);
        free(kv[i].strs);
        mk_xdecref(kv[i].arr);
    }
    free(kv);
}

/* GGML's Q4_0 (2), Q4_1 (3) and Q8_0 (8) blocks of 32 weights, unpacked as MLX does into
 * (uint32 weights, float16 scales, float16 biases) of affine quantisation with group size 32. */
static int gguf_quant_bits(unsigned t) { return t == 2 || t == 3 ? 4 : t == 8 ? 8 : 0; }
/* bytes per block */
static size_t gguf_quant_block(unsigned t) { return t == 2 ? 18 : t == 3 ? 20 : 34; }
static int64_t gguf_quant_group(unsigned t) { (void)t; return 32; }

/* The other types MLX loads (through gguflib's gguf_tensor_to_f16): BF16 (30)
 * and the k-quants Q2_K (10), Q4_K (12), Q6_K (14), each weight computed in
 * float from GGML's block layout and rounded once to float16. Blocks of
 * gguf_f16_items weights in gguf_f16_bytes bytes; 0 for other types. */
static int64_t gguf_f16_items(unsigned t) { return t == 30 ? 1 : t == 10 || t == 12 || t == 14 ? 256 : 0; }
static size_t gguf_f16_bytes(unsigned t) { return t == 30 ? 2 : t == 10 ? 84 : t == 12 ? 144 : 210; }

static float f16_at(const uint8_t *p) {
    mk_f16 h;
    memcpy(&h, p, 2);
    return mk_f16_to_f32(h);
}

/* GGML's names for the tensor types, for the error of the ones MLX refuses */
static const char *gguf_type_name(unsigned t) {
    static const char *const names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                        "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                        "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
                                        "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
    return t < sizeof names / sizeof *names ? names[t] : "unknown";
}

/* count weights of type t from data (whole blocks present) into out */
static void gguf_to_f16(unsigned t, const uint8_t *data, int64_t count, mk_f16 *out) {
    int64_t i = 0;
    if (t == 30) { /* bfloat16: the high half of a float32 */
        for (; i < count; i++) {
            uint16_t h;
            memcpy(&h, data + 2 * i, 2);
            out[i] = mk_f32_to_f16(mk_bf16_to_f32((mk_bf16){h}));
        }
        return;
    }
    for (const uint8_t *blk = data; i < count; blk += gguf_f16_bytes(t)) {
        if (t == 12) {
            /* Q4_K: f16 d, f16 dmin, 12 bytes of 8 6-bit scales and 8 6-bit
             * mins, then 128 bytes: per 32 bytes, 32 weights in the low
             * nibbles then 32 in the high ones; w = q * (d * sc) - dmin * m.
             * GGML's reference gives sub-block j scale/min j; gguflib (so
             * MLX) gives both sub-blocks of a 32-byte run (2c, 2c + 1) the
             * scale and min of 2c, and MLX's results are what mkpy follows
             * (docs/design.md, "API surface, continued"). */
            float d = f16_at(blk), dmin = f16_at(blk + 2), sc[8], mn[8];
            const uint8_t *k = blk + 4, *q = blk + 16;
            for (int j = 0; j < 8; j++) {
                int dv = j < 4 ? k[j] & 63 : (k[j + 4] & 15) | (k[j - 4] >> 6) << 4;
                int mv = j < 4 ? k[j + 4] & 63 : (k[j + 4] >> 4) | (k[j] >> 6) << 4;
                sc[j] = (float)dv * d;
                mn[j] = (float)mv * dmin;
            }
            for (int j = 0; j < 8 && i < count; j++)
                for (int e = 0; e < 32 && i < count; e++) {
                    int v = j % 2 ? q[(j / 2) * 32 + e] >> 4 : q[(j / 2) * 32 + e] & 15;
                    float w = (float)v * sc[j & ~1];
                    out[i++] = mk_f32_to_f16(w - mn[j & ~1]);
                }
        } else if (t == 14) {
            /* Q6_K: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16
             * int8 scales, f16 d; two halves of 128 weights; the 6-bit
             * value is stored plus 32; w = (d * scale) * (q - 32) */
            float d = f16_at(blk + 208);
            for (int h = 0; h < 2; h++) {
                const uint8_t *lo = blk + 64 * h, *hi = blk + 128 + 32 * h;
                const int8_t *scl = (const int8_t *)(blk + 192) + 8 * h;
                for (int j = 0; j < 128 && i < count; j++) {
                    int v = ((lo[j % 64] >> (j / 64 * 4)) & 15) | ((hi[j % 32] >> (j / 32 * 2)) & 3) << 4;
                    float s = d * (float)scl[j / 16];
                    out[i++] = mk_f32_to_f16(s * (float)(v - 32));
                }
            }
        } else {
            /* Q2_K: 16 bytes of (4-bit min << 4 | 4-bit scale) per 16
             * weights, 64 bytes of 2-bit values (two halves of 128: weight j
             * of a half is bits 2*(j/32) of byte j%32), f16 d, f16 dmin;
             * w = q * (d * scale) - dmin * min */
            float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
            for (int j = 0; j < 256 && i < count; j++) {
                int h = j / 128, jj = j % 128;
                uint8_t sm = blk[j / 16];
                int v = (blk[16 + 32 * h + jj % 32] >> (jj / 32 * 2)) & 3;
                float s = d * (float)(sm & 15), m = dmin * (float)(sm >> 4);
                float w = (float)v * s;
                out[i++] = mk_f32_to_f16(w - m);
            }
        }
    }
}

static int gguf_add_quantized(mk_named *out, char *name, unsigned t, int ndim, const int64_t *shape,
                              const uint8_t *data) {
    int bits = gguf_quant_bits(t);
    int64_t wshape[MK_MAX_NDIM], sshape[MK_MAX_NDIM];
    for (int i = 0; i < ndim; i++) wshape[i] = sshape[i] = shape[i];
    wshape[ndim - 1] = shape[ndim - 1] * bits / 32;
    sshape[ndim - 1] = shape[ndim - 1] / 32;
    mk_array *w = mk_array_empty(MK_UINT32, ndim, wshape), *sc = mk_array_empty(MK_FLOAT16, ndim, sshape),
             *bi = mk_array_empty(MK_FLOAT16, ndim, sshape);
    size_t nl = strlen(name), pl = nl >= 7 ? nl - 7 : nl; /* MLX drops ".weight" (any 7 chars) */
    char *sname = malloc(pl + 8), *bname = malloc(pl + 8);
    if (!w || !sc || !bi || !sname || !bname) {
        mk_xdecref(w), mk_xdecref(sc), mk_xdecref(bi);
        free(sname), free(bname), free(name);
        if (mk_error_code() == MK_OK) mk_nomem();
        return -1;
    }
    memcpy(sname, name, pl);
    memcpy(sname + pl, ".scales", 8);
    memcpy(bname, name, pl);
    memcpy(bname + pl, ".biases", 8);
    uint8_t *wd = mk_data(w);
    mk_f16 *s = mk_data(sc), *b = mk_data(bi);
    size_t blk = gguf_quant_block(t);
    for (int64_t g = 0; g < sc->size; g++, data += blk) {
        memcpy(&s[g], data, 2);
        float f = mk_f16_to_f32(s[g]);
        if (t == 3) memcpy(&b[g], data + 2, 2);
        else b[g] = mk_f32_to_f16((t == 2 ? -8.0f : -128.0f) * f);
        if (t == 8) {
            for (int j = 0; j < 32; j++) *wd++ = data[2 + j] ^ 0x80;
            continue;
        }
        const uint8_t *q = data + (t == 3 ? 4 : 2);
        for (int k = 0; k < 8; k++) wd[k] = (uint8_t)((q[2 * k] & 15) | (q[2 * k + 1] & 15) << 4);
        for (int k = 0; k < 8; k++) wd[8 + k] = (uint8_t)(q[2 * k] >> 4 | (q[2 * k + 1] >> 4) << 4);
        wd += 16;
    }
    for (int i = 0; i < out->n; i++)
        if (!strcmp(out->names[i], sname) || !strcmp(out->names[i], bname) || !strcmp(out->names[i], name)) {
            mk_error_set(MK_ERR_RUNTIME,
                         "[load_gguf] Duplicate parameter name %.200s this can happend when loading quantized tensors.",
                         out->names[i]);
            mk_decref(w), mk_decref(sc), mk_decref(bi);
            free(sname), free(bname), free(name);
            return -1;
        }
    if (named_add(out, name, w) < 0) {
        mk_decref(sc), mk_decref(bi), free(sname), free(bname);
        return -1;
    }
    if (named_add(out, sname, sc) < 0) {
        mk_decref(bi), free(bname);
        return -1;
    }
    return named_add(out, bname, bi);
}

/* A tensor's `count` units of `unit` bytes from `off` lie within the `avail`
 * bytes of data, and its name is new; else MLX's error (-1). */
static int gguf_tensor_fits(const mk_named *out, const char *name, uint64_t off, uint64_t avail, uint64_t count,
                            size_t unit) {
    if (off > avail || count > (avail - off) / unit) {
        mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Tensor '%.200s' has data past the end of the file", name);
        return -1;
    }
    for (int j = 0; j < out->n; j++)
        if (!strcmp(out->names[j], name)) {
            mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Duplicate parameter name %.200s", name);
            return -1;
        }
    return 0;
}

int mk_gguf_read(const uint8_t *p, size_t n, mk_named *out, mk_gguf_kv **kvs_out, int *nkv_out) {
    memset(out, 0, sizeof *out);
    *kvs_out = NULL;
    *nkv_out = 0;
    gr r = {p, n, 0};
    uint64_t magic, version, ntensors, nkv;
    mk_gguf_kv *kvs = NULL;
    int nk = 0;
    uint64_t alignment = 32;
    if (n < 4 || memcmp(p, "GGUF", 4) != 0) return gguf_bad("no GGUF magic");
    if (gr_u(&r, 4, &magic) < 0 || gr_u(&r, 4, &version) < 0) return -1;
    if (version != 2 && version != 3) {
        mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Unsupported GGUF version %llu", (unsigned long long)version);
        return -1;
    }
    if (gr_u(&r, 8, &ntensors) < 0 || gr_u(&r, 8, &nkv) < 0) return -1;
    /* each key-value takes at least 12 bytes, each tensor info at least 24 */
    if (nkv > (n - r.at) / 12 || ntensors > (n - r.at) / 24) return gguf_bad("counts larger than the file");
    kvs = calloc((size_t)nkv + 1, sizeof *kvs);
    if (!kvs) return mk_nomem(), -1;
    for (; (uint64_t)nk < nkv; nk++) {
        mk_gguf_kv *kv = &kvs[nk];
        uint64_t t;
        if (!(kv->key = gr_str(&r)) || gr_u(&r, 4, &t) < 0) goto error;
        if (t == G_STR) {
            kv->kind = MK_GGUF_STR;
            if (!(kv->str = gr_str(&r))) goto error;
        } else if (t == G_ARR) {
            uint64_t et, count;
            if (gr_u(&r, 4, &et) < 0 || gr_u(&r, 8, &count) < 0) goto error;
            if (et == G_ARR) {
                mk_error_set(MK_ERR_VALUE, "[load_gguf] Only supports loading 1-layer of nested arrays.");
                goto error;
            }
            if (et == G_STR) {
                kv->kind = MK_GGUF_STRS;
                if (count > (n - r.at) / 8) {
                    gguf_bad("string array past the end of the file");
                    goto error;
                }
                if (!(kv->strs = calloc((size_t)count + 1, sizeof *kv->strs))) {
                    mk_nomem();
                    goto error;
                }
                for (; (uint64_t)kv->nstrs < count; kv->nstrs++)
                    if (!(kv->strs[kv->nstrs] = gr_str(&r))) goto error;
            } else {
                kv->kind = MK_GGUF_ARRAY;
                if (!(kv->arr = gr_values(&r, (unsigned)et, count, 1))) goto error;
            }
        } else {
            kv->kind = MK_GGUF_ARRAY;
            if (!(kv->arr = gr_values(&r, (unsigned)t, 1, 0))) goto error;
            if (!strcmp(kv->key, "general.alignment") && t == G_U32) {
                alignment = *(uint32_t *)mk_data(kv->arr);
                if (alignment == 0 || (alignment & (alignment - 1))) {
                    gguf_bad("general.alignment is not a power of two");
                    nk++;
                    goto error;
                }
            }
        }
    }
    typedef struct {
        int dtype, ndim, qtype, ftype;
        int64_t shape[MK_MAX_NDIM];
        uint64_t off;
    } tinfo;
    tinfo *ti = calloc((size_t)ntensors + 1, sizeof *ti);
    char **tn = calloc((size_t)ntensors + 1, sizeof *tn);
    if (!ti || !tn) {
        free(ti);
        free(tn);
        mk_nomem();
        goto error;
    }
    uint64_t i;
    for (i = 0; i < ntensors; i++) {
        uint64_t nd, t;
        if (!(tn[i] = gr_str(&r)) || gr_u(&r, 4, &nd) < 0) goto terror;
        if (nd > MK_MAX_NDIM) {
            gguf_bad("too many dimensions");
            goto terror;
        }
        ti[i].ndim = (int)nd;
        for (uint64_t d = 0; d < nd; d++) {
            uint64_t v;
            if (gr_u(&r, 8, &v) < 0) goto terror;
            if (v > INT64_MAX) {
                gguf_bad("dimension too large");
                goto terror;
            }
            ti[i].shape[nd - 1 - d] = (int64_t)v; /* GGML lists dims innermost first */
        }
        if (gr_u(&r, 4, &t) < 0 || gr_u(&r, 8, &ti[i].off) < 0) goto terror;
        ti[i].dtype = gguf_tensor_dtype((unsigned)t);
        ti[i].qtype = gguf_quant_bits((unsigned)t) ? (int)t : 0;
        if (ti[i].qtype && (nd == 0 || ti[i].shape[nd - 1] % 32 != 0)) {
            mk_error_set(MK_ERR_RUNTIME, "[load_gguf] tensor %.200shas incompatible last dim shape: %lld", tn[i],
                         nd ? (long long)ti[i].shape[nd - 1] : 0LL);
            goto terror;
        }
        ti[i].ftype = t < 64 && gguf_f16_items((unsigned)t) ? (int)t : 0;
        if (ti[i].dtype < 0 && !ti[i].qtype && !ti[i].ftype) {
            /* MLX hands every other type to gguflib's gguf_tensor_to_f16, which refuses it */
            mk_error_set(MK_ERR_RUNTIME,
                         "[load_gguf] gguf_tensor_to_f16 failed: tensor '%.200s' has GGUF type %llu (%s), which MLX "
                         "does not load (it loads F32, F16, BF16, I8, I16, I32, Q4_0, Q4_1, Q8_0, Q2_K, Q4_K and "
                         "Q6_K).",
                         tn[i], (unsigned long long)t, gguf_type_name(t < 1000 ? (unsigned)t : 1000));
            goto terror;
        }
    }
    size_t base = r.at + (size_t)((alignment - r.at % alignment) % alignment);
    if (base > n) base = n;
    for (i = 0; i < ntensors; i++) {
        int64_t size = mk_shape_size(ti[i].ndim, ti[i].shape);
        if (size < 0) {
            mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Tensor '%.200s' is too large", tn[i]);
            goto terror;
        }
        size_t avail = n - base;
        if (ti[i].qtype) {
            size_t blk = gguf_quant_block((unsigned)ti[i].qtype);
            int64_t grp = gguf_quant_group((unsigned)ti[i].qtype);
            if (size % grp) {
                mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Tensor '%.200s' is not a whole number of blocks", tn[i]);
                goto terror;
            }
            if (ti[i].off > avail || (uint64_t)(size / grp) > (avail - ti[i].off) / blk) {
                mk_error_set(MK_ERR_RUNTIME, "[load_gguf] Tensor '%.200s' has data past the end of the file", tn[i]);
                goto terror;
            }
            char *name = tn[i];
            tn[i] = NULL;
            if (gguf_add_quantized(out, name, (unsigned)ti[i].qtype, ti[i].ndim, ti[i].shape, p + base + ti[i].off) < 0)
                goto terror;
            continue;
        }
        if (ti[i].ftype) {
            /* float16 from the blocks (a last partial block must be present whole) */
            unsigned ft = (unsigned)ti[i].ftype;
            int64_t per = gguf_f16_items(ft), nblk = (size + per - 1) / per;
            if (gguf_tensor_fits(out, tn[i], ti[i].off, avail, (uint64_t)nblk, gguf_f16_bytes(ft)) < 0) goto terror;
            mk_array *a = mk_array_empty(MK_FLOAT16, ti[i].ndim, ti[i].shape);
            if (!a) goto terror;
            gguf_to_f16(ft, p + base + ti[i].off, size, mk_data(a));
            char *name = tn[i];
            tn[i] = NULL;
            if (named_add(out, name, a) < 0) goto terror;
            continue;
        }
        size_t isz = mk_dtype_size((mk_dtype)ti[i].dtype);
        if (gguf_tensor_fits(out, tn[i], ti[i].off, avail, (uint64_t)size, isz) < 0) goto terror;
        mk_array *a = mk_array_empty((mk_dtype)ti[i].dtype, ti[i].ndim, ti[i].shape);
        if (!a) goto terror;
        if (size) memcpy(mk_data(a), p + base + ti[i].off, (size_t)size * isz);
        char *name = tn[i];
        tn[i] = NULL;
        if (named_add(out, name, a) < 0) goto terror;
    }
    for (i = 0; i < ntensors; i++) free(tn[i]);
    free(tn);
    free(ti);
    *kvs_out = kvs;
    *nkv_out = nk;
    return 0;
terror:
    for (i = 0; i < ntensors; i++) free(tn[i]);
    free(tn);
    free(ti);
error:
    mk_gguf_kvs_free(kvs, nk + 1); /* calloc'd nkv + 1 entries: the partial one too */
    mk_named_free(out);
    return -1;
}

static int put_gstr(mk_bytes *b, const char *s) {
    size_t l = strlen(s);
    return put_le(b, l, 8) < 0 || mk_bytes_put(b, s, l) < 0 ? -1 : 0;
}

static int gguf_value_type(mk_dtype t) {
    switch (t) {
    case MK_UINT8: return G_U8;
    case MK_INT8: return G_I8;
    case MK_UINT16: return G_U16;
    case MK_INT16: return G_I16;
    case MK_UINT32: return G_U32;
    case MK_INT32: return G_I32;
    case MK_FLOAT32: return G_F32;
    case MK_BOOL: return G_BOOL;
    case MK_UINT64: return G_U64;
    case MK_INT64: return G_I64;
    default: return -1;
    }
}

int mk_gguf_write(mk_bytes *out, int n, const char *const *names, mk_array *const *arrays, int nkv,
                  const mk_gguf_kv *kvs) {
    for (int i = 0; i < n; i++)
        if (gguf_tensor_type(arrays[i]->dtype) < 0) {
            mk_error_set(MK_ERR_RUNTIME, "[save_gguf] dtype %s is not supported", mk_dtype_name(arrays[i]->dtype));
            return -1;
        }
    if (mk_bytes_put(out, "GGUF", 4) < 0 || put_le(out, 3, 4) < 0 || put_le(out, (uint64_t)n, 8) < 0 ||
        put_le(out, (uint64_t)nkv, 8) < 0)
        return -1;
    for (int i = 0; i < nkv; i++) {
        const mk_gguf_kv *kv = &kvs[i];
        if (put_gstr(out, kv->key) < 0) return -1;
        if (kv->kind == MK_GGUF_STR) {
            if (put_le(out, G_STR, 4) < 0 || put_gstr(out, kv->str) < 0) return -1;
        } else if (kv->kind == MK_GGUF_STRS) {
            if (put_le(out, G_ARR, 4) < 0 || put_le(out, G_STR, 4) < 0 || put_le(out, (uint64_t)kv->nstrs, 8) < 0)
                return -1;
            for (int64_t j = 0; j < kv->nstrs; j++)
                if (put_gstr(out, kv->strs[j]) < 0) return -1;
        } else {
            const mk_array *a = kv->arr;
            int vt = gguf_value_type(a->dtype);
            if (a->ndim > 1) {
                mk_error_set(MK_ERR_RUNTIME, "[save_gguf] Cannot save arrays with more than one dimension.");
                return -1;
            }
            if (a->size == 0) {
                mk_error_set(MK_ERR_RUNTIME, "[save_gguf] Cannot save empty arrays.");
                return -1;
            }
            if (vt < 0) {
                mk_error_set(MK_ERR_VALUE, "[save_gguf] array type %s not support for metadata.",
                             mk_dtype_name(a->dtype));
                return -1;
            }
            if (a->ndim == 1 &&
                (put_le(out, G_ARR, 4) < 0 || put_le(out, (uint64_t)vt, 4) < 0 || put_le(out, (uint64_t)a->size, 8) < 0))
                return -1;
            if (a->ndim == 0 && put_le(out, (uint64_t)vt, 4) < 0) return -1;
            if (put_array_data(out, a) < 0) return -1;
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const mk_array *a = arrays[i];
        off += (32 - off % 32) % 32;
        if (put_gstr(out, names[i]) < 0 || put_le(out, (uint64_t)a->ndim, 4) < 0) return -1;
        for (int d = a->ndim - 1; d >= 0; d--)
            if (put_le(out, (uint64_t)a->shape[d], 8) < 0) return -1;
        if (put_le(out, (uint64_t)gguf_tensor_type(a->dtype), 4) < 0 || put_le(out, off, 8) < 0) return -1;
        off += (uint64_t)a->size * mk_dtype_size(a->dtype);
    }
    static const uint8_t zeros[32];
    size_t start = 0;
    if (mk_bytes_put(out, zeros, (32 - out->len % 32) % 32) < 0) return -1;
    start = out->len;
    for (int i = 0; i < n; i++) {
        if (mk_bytes_put(out, zeros, (32 - (out->len - start) % 32) % 32) < 0) return -1;
        if (put_array_data(out, arrays[i]) < 0) return -1;
    }
    return 0;
}
