/* Devices and streams (stream.h): the global default device, the process's
 * stream counter and thread-unsafe streams under one lock, the rest per
 * thread. */
#include "stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "error.h"

static _Atomic int default_device = MK_GPU;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t nstreams;            /* indices handed out so far */
static mk_stream *unsafe;            /* thread-unsafe streams */
static size_t nunsafe, capunsafe;
static int64_t nthread_local;        /* thread-local stream indices so far */

typedef struct {
    int64_t tls;
    mk_stream s;
} tls_entry;

/* Per thread; the arrays are freed when the thread exits (tstate_free). */
static _Thread_local struct {
    bool registered;
    mk_stream dflt[2];   /* MK_STREAM_NONE until first use */
    mk_stream override;
    int calls;           /* open stream binding calls (mk_stream_call_begin) */
    mk_stream *own;      /* the streams this thread made and has not cleared */
    size_t nown, capown;
    tls_entry *tl;       /* thread-local stream -> this thread's stream */
    size_t ntl, captl;
} ts = {false, {MK_STREAM_NONE, MK_STREAM_NONE}, MK_STREAM_NONE, 0, NULL, 0, 0, NULL, 0, 0};

static pthread_key_t ts_key;
static pthread_once_t ts_once = PTHREAD_ONCE_INIT;

static void tstate_free(void *unused) {
    (void)unused;
    free(ts.own);
    free(ts.tl);
    ts.own = NULL;
    ts.tl = NULL;
    ts.nown = ts.capown = ts.ntl = ts.captl = 0;
}

static void ts_key_make(void) { pthread_key_create(&ts_key, tstate_free); }

/* The arrays of this thread get freed at its exit. */
static void tstate_register(void) {
    if (ts.registered) return;
    pthread_once(&ts_once, ts_key_make);
    pthread_setspecific(ts_key, (void *)1);
    ts.registered = true;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 4;
    while (c < need) c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p) {
        mk_nomem();
        return -1;
    }
    *arr = p;
    *cap = c;
    return 0;
}

mk_device_type mk_default_device(void) { return atomic_load_explicit(&default_device, memory_order_relaxed); }

void mk_set_default_device(mk_device_type d) { atomic_store_explicit(&default_device, d, memory_order_relaxed); }

/* A fresh index, or MK_STREAM_NONE with the error set. */
static mk_stream next_stream(mk_device_type d, bool thread_unsafe) {
    pthread_mutex_lock(&mu);
    if (nstreams > MK_STREAM_MAX_INDEX) {
        pthread_mutex_unlock(&mu);
        mk_error_set(MK_ERR_RUNTIME, "[new_stream] Too many streams.");
        return MK_STREAM_NONE;
    }
    mk_stream s = mk_stream_make(d, nstreams);
    if (thread_unsafe) {
        if (grow((void **)&unsafe, &capunsafe, nunsafe + 1, sizeof *unsafe) < 0) {
            pthread_mutex_unlock(&mu);
            return MK_STREAM_NONE;
        }
        unsafe[nunsafe++] = s;
    }
    nstreams++;
    pthread_mutex_unlock(&mu);
    return s;
}

mk_stream mk_new_stream(mk_device_type d) {
    tstate_register();
    if (grow((void **)&ts.own, &ts.capown, ts.nown + 1, sizeof *ts.own) < 0) return MK_STREAM_NONE;
    mk_stream s = next_stream(d, false);
    if (s != MK_STREAM_NONE) ts.own[ts.nown++] = s;
    return s;
}

mk_stream mk_new_thread_unsafe_stream(mk_device_type d) { return next_stream(d, true); }

mk_stream mk_default_stream(mk_device_type d) {
    mk_stream s = ts.dflt[d];
    if (s == MK_STREAM_NONE) {
        s = mk_new_stream(d);
        if (s != MK_STREAM_NONE) ts.dflt[d] = s;
    }
    return s;
}

void mk_set_default_stream(mk_stream s) { ts.dflt[mk_stream_device(s)] = s; }

int64_t mk_new_thread_local_stream(void) {
    pthread_mutex_lock(&mu);
    int64_t i = nthread_local++;
    pthread_mutex_unlock(&mu);
    return i;
}

mk_stream mk_stream_from_thread_local(int64_t tls, mk_device_type d) {
    for (size_t i = 0; i < ts.ntl; i++)
        if (ts.tl[i].tls == tls) return ts.tl[i].s;
    tstate_register();
    if (grow((void **)&ts.tl, &ts.captl, ts.ntl + 1, sizeof *ts.tl) < 0) return MK_STREAM_NONE;
    mk_stream s = mk_new_stream(d);
    if (s == MK_STREAM_NONE) return s;
    ts.tl[ts.ntl++] = (tls_entry){tls, s};
    return s;
}

void mk_clear_streams(void) {
    ts.nown = 0;
    if ((pid_t)syscall(SYS_gettid) == getpid()) {
        pthread_mutex_lock(&mu);
        size_t k = 0;
        for (size_t i = 0; i < nunsafe; i++)
            if (mk_stream_device(unsafe[i]) != MK_GPU) unsafe[k++] = unsafe[i];
        nunsafe = k;
        pthread_mutex_unlock(&mu);
    }
}

bool mk_stream_usable(mk_stream s) {
    for (size_t i = 0; i < ts.nown; i++)
        if (ts.own[i] == s) return true;
    bool found = false;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nunsafe && !found; i++) found = unsafe[i] == s;
    pthread_mutex_unlock(&mu);
    return found;
}

int mk_stream_check_usable(mk_stream s) {
    if (s == MK_STREAM_NONE || mk_stream_usable(s)) return 0;
    mk_error_set(MK_ERR_RUNTIME, "There is no Stream(%s, %u) in current thread.", mk_device_name(mk_stream_device(s)),
                 (unsigned)mk_stream_index(s));
    return -1;
}

mk_stream mk_current_stream(void) {
    if (ts.override != MK_STREAM_NONE) return ts.override;
    mk_device_type d = mk_default_device();
    mk_stream s = ts.dflt[d];
    return s != MK_STREAM_NONE ? s : mk_default_stream(d);
}

mk_stream mk_stream_scope(mk_stream s) {
    mk_stream old = ts.override;
    ts.override = s;
    return old;
}

mk_stream mk_stream_override(void) { return ts.override; }

mk_stream mk_stream_call_begin(void) {
    ts.calls++;
    return ts.override;
}

void mk_stream_call_end(mk_stream saved) {
    ts.calls--;
    ts.override = saved;
}

bool mk_stream_in_call(void) { return ts.calls > 0; }

int mk_current_stream_is_gpu(void) {
    mk_stream s = mk_current_stream();
    if (s == MK_STREAM_NONE) return -1;
    return mk_stream_device(s) == MK_GPU;
}
