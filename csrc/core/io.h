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
