/* Error reporting for the core: a code plus a message, kept per thread.
 *
 * Core functions signal failure by returning NULL (or -1) after calling
 * mk_error_set(). The binding layer turns the pending error into a Python
 * exception of the matching class. Nothing here knows about Python. */
#ifndef MK_ERROR_H
#define MK_ERROR_H

typedef enum {
    MK_OK = 0,
    MK_ERR_VALUE,    /* ValueError */
    MK_ERR_TYPE,     /* TypeError */
    MK_ERR_INDEX,    /* IndexError */
    MK_ERR_RUNTIME,  /* RuntimeError */
    MK_ERR_MEMORY,   /* MemoryError */
    MK_ERR_OVERFLOW, /* OverflowError */
    MK_ERR_INTERRUPT, /* KeyboardInterrupt (Ctrl-C during an eval) */
} mk_errcode;

#define MK_ERRMSG_MAX 8192

#if defined(__GNUC__)
#define MK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MK_PRINTF(a, b)
#endif

/* Sets the pending error of this thread (overwrites any earlier one). */
void mk_error_set(mk_errcode code, const char *fmt, ...) MK_PRINTF(2, 3);
/* Sets an out-of-memory error and returns NULL, for `return mk_nomem();`. */
void *mk_nomem(void);
mk_errcode mk_error_code(void);
const char *mk_error_message(void);
void mk_error_clear(void);

#endif
