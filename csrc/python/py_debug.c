/* mkpy.metal's debugging functions: the profiler behind MLX's
 * start_capture/stop_capture, debug builds, MKPY_DEBUG and the environment
 * check of `python -m mkpy` (the logic is in csrc/kernel/diag.c and
 * envcheck.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernel/diag.h"
#include "mkpy.h"

#define FN(f) (PyCFunction)(void (*)(void))(f)

PyDoc_STRVAR(start_capture_doc,
             "start_capture(path)\n--\n\n"
             "Start a capture: MLX's name, with mkpy's meaning.\n\n"
             "On a Mac MLX records a Metal GPU trace (``.gputrace``) for Xcode. mkpy has no GPU, so it\n"
             "records what its CPU back-end runs until :func:`stop_capture`: every Metal kernel launch\n"
             "(compile or cache-lookup time, run time, grid, threadgroup, threads, threadgroups, barriers\n"
             "in the source, engine) and every other op evaluated (run time, output dtype and shape).\n"
             ":func:`stop_capture` writes them to ``path`` as a Chrome trace (JSON), which\n"
             "https://ui.perfetto.dev and chrome://tracing open; :func:`capture_report` gives a table.\n\n"
             "Args:\n"
             "    path (str): The file to write the trace to (created now, written at stop_capture).\n\n"
             "Raises:\n"
             "    RuntimeError: A capture is already running, or ``path`` cannot be written.");

static PyObject *py_start_capture(PyObject *m, PyObject *arg) {
    (void)m;
    PyObject *b = NULL;
    if (!PyUnicode_FSConverter(arg, &b)) return NULL;
    int rc = mkk_profile_start(PyBytes_AS_STRING(b));
    Py_DECREF(b);
    if (rc < 0) return mkpy_raise();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stop_capture_doc,
             "stop_capture()\n--\n\n"
             "Stop the capture started by :func:`start_capture` and write its Chrome trace JSON.\n\n"
             "The trace has one complete event (``\"ph\": \"X\"``) per op (category ``op``) and per kernel\n"
             "launch (category ``kernel``, with ``compile`` and ``run`` events inside it); a kernel's\n"
             "``args`` hold its grid, threadgroup, threads, threadgroups, barriers, engine, cache\n"
             "(memory, disk or compiled), compile_ms and run_ms.\n\n"
             "Raises:\n"
             "    RuntimeError: No capture is running, or the file cannot be written.");

static PyObject *py_stop_capture(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = mkk_profile_stop();
    Py_END_ALLOW_THREADS if (rc < 0) return mkpy_raise();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(capture_report_doc,
             "capture_report()\n--\n\n"
             "The report table of the running or last capture (mkpy only): one row per kernel (and\n"
             "grid/threadgroup) and per op, with calls, total, compile and run milliseconds, grid,\n"
             "threadgroup, threads, barriers and engine. Kernels first, then ops by total time.");

static PyObject *py_capture_report(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    char *r = mkk_profile_report();
    if (!r) return mkpy_raise();
    PyObject *s = PyUnicode_FromString(r);
    free(r);
    return s;
}

PyDoc_STRVAR(set_kernel_debug_doc,
             "set_kernel_debug(enabled)\n--\n\n"
             "Build Metal kernels for a debugger from now on (mkpy only; the same as\n"
             "``MKPY_KERNEL_DEBUG=1``): ``-O0 -g``, no precompiled header, every file at a stable place,\n"
             "``<cache>/debug/<kernel>-<hash>/`` (``source.metal`` is your ``source`` line for line,\n"
             "``header.metal``, ``kernel.metal`` the generated Metal, ``kernel.cpp``, ``kernel.so``), and\n"
             "debug information that names those files, so that gdb breaks at ``source.metal:<line>``.\n"
             "The setting is part of the kernel cache's key. ``None`` goes back to MKPY_KERNEL_DEBUG.\n"
             "See docs/debugging.md.");

static PyObject *py_set_kernel_debug(PyObject *m, PyObject *arg) {
    (void)m;
    if (arg == Py_None) {
        mkk_set_debug_build(-1);
        Py_RETURN_NONE;
    }
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    mkk_set_debug_build(on);
    Py_RETURN_NONE;
}

static PyObject *py_env_check(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    char line[600];
    int py_ok = PY_VERSION_HEX >= 0x03090000;
    snprintf(line, sizeof line, "%s%s", Py_GetVersion(), py_ok ? "" : " (3.9 or newer needed)");
    for (char *p = line; *p; p++)
        if (*p == '\n') *p = ' ';
    char *text;
    int failures = 0;
    Py_BEGIN_ALLOW_THREADS text = mkk_env_check(line, py_ok, &failures);
    Py_END_ALLOW_THREADS mkpy_flush_deferred(); /* a cache folder warning */
    if (!text) return PyErr_NoMemory();
    PyObject *r = Py_BuildValue("(si)", text, failures);
    free(text);
    return r;
}

static PyObject *py_set_debug_level(PyObject *m, PyObject *arg) {
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    mkk_set_debug_level((int)v);
    Py_RETURN_NONE;
}

PyMethodDef mkpy_debug_functions[] = {
    {"start_capture", py_start_capture, METH_O, start_capture_doc},
    {"stop_capture", py_stop_capture, METH_NOARGS, stop_capture_doc},
    {"capture_report", py_capture_report, METH_NOARGS, capture_report_doc},
    {"set_kernel_debug", py_set_kernel_debug, METH_O, set_kernel_debug_doc},
    {"_env_check", py_env_check, METH_NOARGS, NULL},
    {"_set_debug_level", py_set_debug_level, METH_O, NULL},
    {NULL},
};
