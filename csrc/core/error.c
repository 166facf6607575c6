#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local struct {
    mk_errcode code;
    char msg[MK_ERRMSG_MAX];
} err;

void mk_error_set(mk_errcode code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.msg, sizeof err.msg, fmt, ap);
    va_end(ap);
    err.code = code;
}

void *mk_nomem(void) {
    mk_error_set(MK_ERR_MEMORY, "[malloc] Unable to allocate memory.");
    return NULL;
}

mk_errcode mk_error_code(void) { return err.code; }
const char *mk_error_message(void) { return err.code ? err.msg : ""; }
void mk_error_clear(void) { err.code = MK_OK; err.msg[0] = 0; }
