/* Calls into Python that C code would make while the GIL is released are
 * deferred: kept here and made by the next thread that holds the GIL and
 * holds no mkpy state (mkpy_flush_deferred, called by mkpy_eval after it
 * takes the GIL back, and by the other bindings that release it around
 * kernel-layer work).
 *
 * Why (docs/design.md, "Threads: no Python under the released GIL"): a
 * thread inside mk_eval may hold mkpy state another thread waits for (a
 * primitive it runs, the kernel checker's lock, an entry the JIT builds);
 * if it then waited for the GIL (to print a verbose line, a kernel's printf
 * output, a cache warning, or to drop a custom function's Python closure),
 * a thread holding the GIL and waiting for that state would deadlock with
 * it, and Python code run there (sys.stdout.write, a finaliser) could call
 * back into mkpy and wait for the very primitive its own thread is running.
 * Deferred, the C side only takes a small lock of its own to append to a
 * list, which no one holds while waiting for anything. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "mkpy.h"

enum { D_PRINT, D_WARN, D_DECREF };

typedef struct item {
    int kind;
    char *text;
    PyObject *obj;
    struct item *next;
} item;

static pthread_mutex_t defer_mu = PTHREAD_MUTEX_INITIALIZER;
static item *head, **tail = &head;
static atomic_int npending; /* lets mkpy_eval skip the lock when nothing waits */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A forked child has only the forking thread: the lock may have been held
 * by another one. The items stay (the child prints them as the parent
 * would have). */
static void after_fork_child(void) { pthread_mutex_init(&defer_mu, NULL); }
static void register_fork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

static void push(int kind, const char *text, PyObject *obj) {
    item *it = malloc(sizeof *it);
    char *t = text ? strdup(text) : NULL;
    if (!it || (text && !t)) { /* out of memory: the message is lost (an object leaks) */
        free(it);
        free(t);
        return;
    }
    *it = (item){kind, t, obj, NULL};
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&defer_mu);
    *tail = it;
    tail = &it->next;
    atomic_fetch_add_explicit(&npending, 1, memory_order_release);
    pthread_mutex_unlock(&defer_mu);
}

void mkpy_defer_print(const char *text) { push(D_PRINT, text, NULL); }
void mkpy_defer_warning(const char *text) { push(D_WARN, text, NULL); }

void mkpy_defer_decref(PyObject *obj) {
    if (PyGILState_Check()) { /* (a deallocation from Python: drop it now) */
        Py_DECREF(obj);
        return;
    }
    push(D_DECREF, NULL, obj);
}

static void write_stdout(const char *text) {
    PyObject *out = PySys_GetObject("stdout"); /* borrowed */
    if (!out || out == Py_None) return;
    Py_INCREF(out);
    PyObject *r = PyObject_CallMethod(out, "write", "s", text);
    if (r)
        Py_DECREF(r);
    else
        PyErr_Clear(); /* a broken stdout: nowhere to say so */
    Py_DECREF(out);
}

void mkpy_flush_deferred(void) {
    if (!atomic_load_explicit(&npending, memory_order_acquire)) return;
    pthread_mutex_lock(&defer_mu);
    item *list = head;
    head = NULL;
    tail = &head;
    atomic_store_explicit(&npending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&defer_mu);
    /* the caller's pending exception (an eval that failed) stays as it is */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    while (list) {
        item *it = list;
        list = it->next;
        switch (it->kind) {
        case D_PRINT: write_stdout(it->text); break;
        case D_WARN:
            if (PyErr_WarnEx(PyExc_RuntimeWarning, it->text, 1) < 0) PyErr_Clear(); /* -W error: nowhere to raise it */
            break;
        default: Py_DECREF(it->obj); break;
        }
        free(it->text);
        free(it);
    }
    PyErr_Restore(et, ev, tb);
}
