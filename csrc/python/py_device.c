/* Device information and memory counters (mkpy, mkpy.metal). mkpy's CPU
 * back-end stands in for the Metal device, and says so in device_name. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static PyObject *py_cache_memory(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyLong_FromLong(0); /* mkpy frees buffers at once; there is no cache */
}

static PyObject *py_noop(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    (void)args;
    (void)nargs;
    Py_RETURN_NONE;
}

#define MEMORY_FUNCTIONS                                                                               \
    {"get_active_memory", py_active_memory, METH_NOARGS,                                               \
     "get_active_memory() -> int\n--\n\nBytes held by live arrays."},                                  \
        {"get_peak_memory", py_peak_memory, METH_NOARGS,                                               \
         "get_peak_memory() -> int\n--\n\nHighest get_active_memory() since the last reset."},          \
        {"reset_peak_memory", py_reset_peak_memory, METH_NOARGS,                                       \
         "reset_peak_memory() -> None\n--\n\nSet the peak to the current active memory."},              \
        {"get_cache_memory", py_cache_memory, METH_NOARGS,                                             \
         "get_cache_memory() -> int\n--\n\nBytes in the buffer cache (always 0: mkpy frees at once)."}, \
        {"clear_cache", FN(py_noop), METH_FASTCALL, "clear_cache() -> None\n--\n\nFree cached buffers (mkpy keeps none: buffers are freed when arrays die)."}

PyMethodDef mkpy_device_functions[] = {
    {"device_info", FN(py_device_info), METH_FASTCALL,
     "device_info() -> dict\n--\n\nMLX's device keys, describing mkpy's CPU back-end."},
    MEMORY_FUNCTIONS,
    {NULL},
};

PyMethodDef mkpy_metal_functions[] = {
    {"is_available", py_is_available, METH_NOARGS,
     "is_available() -> bool\n--\n\nTrue: mkpy's CPU back-end stands in for the Metal device."},
    {"device_info", FN(py_device_info), METH_FASTCALL,
     "device_info() -> dict\n--\n\nMLX's device keys, describing mkpy's CPU back-end."},
    MEMORY_FUNCTIONS,
    {NULL},
};
