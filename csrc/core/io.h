/* File formats (pure C): .npy, .npz (zip, stored or deflated through zlib)
 * and safetensors. Readers parse a whole file held in memory, so every
 * declared size and offset is checked against the real length before
 * anything is allocated; writers append to a growable byte buffer. The
 * binding (csrc/python/py_io.c) moves the bytes between files and Python. */
#ifndef MK_IO_H
#define MK_IO_H

#include <stddef.h>
#include <stdint.h>

#include "array.h"

typedef struct {
    uint8_t *data;
    size_t len, cap;
} mk_bytes;

int mk_bytes_put(mk_bytes *b, const void *p, size_t n); /* 0 or -1 (MemoryError) */
void mk_bytes_free(mk_bytes *b);

/* .npy: parses one array (evaluated, row-contiguous, converted from
 * big-endian and Fortran order). *used (may be NULL) gets the bytes consumed. */
mk_array *mk_npy_read(const uint8_t *p, size_t n, size_t *used);
/* Bytes shared by lazy loads (a file's content), freed with the last ref. */
typedef struct {
    _Atomic long refcnt;
    size_t len;
    uint8_t data[];
} mk_blob;
mk_blob *mk_blob_new(size_t len); /* refcnt 1; NULL after mk_nomem() */
void mk_blob_decref(mk_blob *b);
/* .npy, read when evaluated (as MLX's Load): the header is parsed now, the
 * returned node keeps a reference to `file` and copies its data on eval. */
mk_array *mk_npy_read_lazy(mk_blob *file);
/* Appends the .npy form of an evaluated array. */
int mk_npy_write(mk_bytes *out, const mk_array *a);

/* A named list of arrays plus string metadata, as the loaders return it. */
typedef struct {
    int n, cap;
    char **names;
    mk_array **arrays;
    int nmeta, metacap;
    char **meta_keys, **meta_values;
} mk_named;
void mk_named_free(mk_named *d);

/* .npz: every member of the zip is a .npy file; names lose ".npy". */
int mk_npz_read(const uint8_t *p, size_t n, mk_named *out);
/* Writes arrays (evaluated) as name + ".npy" members; compress: deflate. */
int mk_npz_write(mk_bytes *out, int n, const char *const *names, mk_array *const *arrays, int compress);

/* safetensors */
int mk_safetensors_read(const uint8_t *p, size_t n, mk_named *out);
int mk_safetensors_write(mk_bytes *out, int n, const char *const *names, mk_array *const *arrays, int nmeta,
                         const char *const *meta_keys, const char *const *meta_values);

#endif

/* GGUF (version 3 written; 2 and 3 read). Tensors: float32, float16, int8,
 * int16, int32, as MLX. Metadata values: a string, a list of strings, or an
 * array (0-d for a scalar, 1-d for a GGUF array). */
enum { MK_GGUF_STR, MK_GGUF_STRS, MK_GGUF_ARRAY };
typedef struct {
    char *key;
    int kind;
    char *str;      /* MK_GGUF_STR */
    int64_t nstrs;  /* MK_GGUF_STRS */
    char **strs;
    mk_array *arr;  /* MK_GGUF_ARRAY */
} mk_gguf_kv;
void mk_gguf_kvs_free(mk_gguf_kv *kv, int n);
int mk_gguf_read(const uint8_t *p, size_t n, mk_named *tensors, mk_gguf_kv **kvs, int *nkv);
/* kv values: arrays evaluated, at most 1-d, non-empty. Keys owned by the caller. */
int mk_gguf_write(mk_bytes *out, int n, const char *const *names, mk_array *const *arrays, int nkv,
                  const mk_gguf_kv *kvs);
