/* Device information and memory counters (mkpy, mkpy.metal). mkpy's CPU
 * back-end stands in for the Metal device, and says so in device_name. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/pool.h"
#include "mkpy.h"

#define FN(f) (PyCFunction)(void (*)(void))(f)

static int64_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(out, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

#define SET(d, key, val)                                                                               \
    do {                                                                                               \
        PyObject *v_ = (val);                                                                          \
        if (!v_ || PyDict_SetItemString(d, key, v_) < 0) {                                             \
            Py_XDECREF(v_);                                                                            \
            Py_DECREF(d);                                                                              \
            return NULL;                                                                               \
        }                                                                                              \
        Py_DECREF(v_);                                                                                 \
    } while (0)

static PyObject *py_device_info(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    (void)args;
    (void)nargs;
    char cpu[256], name[400];
    cpu_model(cpu, sizeof cpu);
    int threads = mk_pool_threads();
    snprintf(name, sizeof name, "mkpy CPU back-end (%s, %d threads)", cpu, threads);
    int64_t mem = physical_memory();
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    SET(d, "device_name", PyUnicode_FromString(name));
    SET(d, "architecture", PyUnicode_FromString("mkpy-cpu"));
    SET(d, "max_buffer_length", PyLong_FromLongLong(mem));
    SET(d, "max_recommended_working_set_size", PyLong_FromLongLong(mem / 4 * 3));
    SET(d, "memory_size", PyLong_FromLongLong(mem));
    SET(d, "resource_limit", PyLong_FromLong(499000));
    SET(d, "backend", PyUnicode_FromString("mkpy-cpu"));
    SET(d, "cpu", PyUnicode_FromString(cpu));
    SET(d, "threads", PyLong_FromLong(threads));
    return d;
}

static PyObject *py_is_available(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    Py_RETURN_TRUE;
}

static PyObject *py_active_memory(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(mk_memory_active());
}

static PyObject *py_peak_memory(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(mk_memory_peak());
}

static PyObject *py_reset_peak_memory(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    mk_memory_reset_peak();
    Py_RETURN_NONE;
}

/* The GPU back-end's memory, whose cache of freed blocks the cache calls
 * count and trim with the core's (NULL: none) */
static const mk_devmem_ops *device_mem(void) {
    const mkb_backend *g = mkb_gpu();
    return g && g->mem && g->mem->cache_bytes ? g->mem : NULL;
}

static PyObject *py_cache_memory(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    const mk_devmem_ops *d = device_mem();
    return PyLong_FromLongLong(mk_cache_memory() + (d ? d->cache_bytes() : 0));
}

/* Memory, cache and wired limits, returned as MLX does (each setter returns
 * the previous value). The cache limit bounds the core's buffer cache (MLX's
 * default: the memory limit); the memory and wired limits are recorded only:
 * mkpy does not cap allocations. */
static int64_t memory_limit = -1, wired_limit = 0;

/* MLX: 1.5 x the recommended working set (3/4 of memory) */
static int64_t default_memory_limit(void) { return physical_memory() / 4 * 3 * 3 / 2; }

static PyObject *set_limit(const char *name, int64_t *slot, int64_t dflt, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    static const char *const names[] = {"limit", NULL};
    PyObject *a[1];
    int64_t v;
    if (mkpy_parse(name, args, nargs, kwnames, names, 1, a) < 0 || mkpy_parse_int(a[0], &v) < 0) return NULL;
    int64_t old = *slot < 0 ? dflt : *slot;
    *slot = v;
    return PyLong_FromLongLong(old);
}

static PyObject *py_set_memory_limit(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return set_limit("set_memory_limit", &memory_limit, default_memory_limit(), args, nargs, kw);
}

static PyObject *py_set_cache_limit(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"limit", NULL};
    PyObject *a[1];
    int64_t v;
    if (mkpy_parse("set_cache_limit", args, nargs, kw, names, 1, a) < 0 || mkpy_parse_int(a[0], &v) < 0) return NULL;
    int64_t old = mk_cache_set_limit(v);
    const mk_devmem_ops *d = device_mem();
    if (d) d->cache_trim(v < 0 ? 0 : v);
    return PyLong_FromLongLong(old == INT64_MAX ? default_memory_limit() : old);
}

static PyObject *py_clear_cache(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    (void)args;
    (void)nargs;
    mk_cache_clear();
    const mk_devmem_ops *d = device_mem();
    if (d) d->cache_trim(0);
    Py_RETURN_NONE;
}

static PyObject *py_set_wired_limit(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"limit", NULL};
    PyObject *a[1];
    int64_t v;
    if (mkpy_parse("set_wired_limit", args, nargs, kw, names, 1, a) < 0 || mkpy_parse_int(a[0], &v) < 0) return NULL;
    /* MLX (Metal) refuses a limit above the recommended working set
     * (device_info's max_recommended_working_set_size) */
    if (v > physical_memory() / 4 * 3) {
        PyErr_SetString(PyExc_ValueError, "[metal::set_wired_limit] Setting a wired limit larger than "
                                          "the maximum working set size is not allowed.");
        return NULL;
    }
    return set_limit("set_wired_limit", &wired_limit, 0, args, nargs, kw);
}

static PyObject *py_get_memory_limit(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(memory_limit < 0 ? default_memory_limit() : memory_limit);
}

#define MEMORY_FUNCTIONS                                                                               \
    {"get_active_memory", py_active_memory, METH_NOARGS,                                               \
     "get_active_memory()\n--\n\nBytes held by live arrays."},                                  \
        {"get_peak_memory", py_peak_memory, METH_NOARGS,                                               \
         "get_peak_memory()\n--\n\nHighest get_active_memory() since the last reset."},          \
        {"reset_peak_memory", py_reset_peak_memory, METH_NOARGS,                                       \
         "reset_peak_memory()\n--\n\nSet the peak to the current active memory."},              \
        {"get_cache_memory", py_cache_memory, METH_NOARGS,                                             \
         "get_cache_memory()\n--\n\nBytes in the buffer caches (the host's and the GPU's): freed buffers kept for reuse."}, \
        {"clear_cache", FN(py_clear_cache), METH_FASTCALL, "clear_cache()\n--\n\nFree the buffers held in the buffer cache."}, \
        {"set_memory_limit", FN(py_set_memory_limit), METH_FASTCALL | METH_KEYWORDS,                       \
         "set_memory_limit(limit)\n--\n\nSet the memory limit; returns the previous one (not enforced)."}, \
        {"set_cache_limit", FN(py_set_cache_limit), METH_FASTCALL | METH_KEYWORDS,                         \
         "set_cache_limit(limit)\n--\n\nSet the buffer cache limit; returns the previous one."},       \
        {"set_wired_limit", FN(py_set_wired_limit), METH_FASTCALL | METH_KEYWORDS,                         \
         "set_wired_limit(limit)\n--\n\nSet the wired memory limit; returns the previous one."}

PyMethodDef mkpy_device_functions[] = {
    {"device_info", FN(py_device_info), METH_FASTCALL,
     "device_info()\n--\n\nMLX's device keys, describing mkpy's CPU back-end."},
    MEMORY_FUNCTIONS,
    {"get_memory_limit", py_get_memory_limit, METH_NOARGS,
     "get_memory_limit()\n--\n\nThe memory limit (see set_memory_limit)."},
    {NULL},
};

PyMethodDef mkpy_metal_functions[] = {
    /* start_capture, stop_capture: py_debug.c (the profiler) */
    {"is_available", py_is_available, METH_NOARGS,
     "is_available()\n--\n\nTrue: mkpy's CPU back-end stands in for the Metal device."},
    {"device_info", FN(py_device_info), METH_FASTCALL,
     "device_info()\n--\n\nMLX's device keys, describing mkpy's CPU back-end."},
    MEMORY_FUNCTIONS,
    {NULL},
};
