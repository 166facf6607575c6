/* The checker mode's switches (mkpy.metal.set_check, is_check_enabled and
 * the scope behind `with mkpy.metal.check():`; csrc/backend/cpu/check.c). */
#include "backend/cpu/check.h"
#include "mkpy.h"

PyDoc_STRVAR(set_check_doc,
             "set_check(enabled)\n--\n\n"
             "mkpy only: turn the kernel checker on or off for every later `metal_kernel` call of the\n"
             "process (the calls are checked when they are evaluated). A checked call runs the kernel\n"
             "instrumented, on one thread, and raises a RuntimeError at evaluation listing what it\n"
             "found: out-of-bounds accesses, races on threadgroup and device memory, reads of\n"
             "uninitialised threadgroup memory, output elements no thread wrote and integer division\n"
             "by zero. ``MKPY_CHECK=1`` in the environment turns it on for the process;\n"
             "``set_check`` overrides it, and ``with mkpy.metal.check():`` overrides both for the\n"
             "calls a thread makes inside it. See docs/kernels.md, \"Checker mode\".");

static PyObject *py_set_check(PyObject *self, PyObject *arg) {
    (void)self;
    int on;
    if (mkpy_parse_bool(arg, 0, &on) < 0) return NULL;
    mkk_check_set(on != 0);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(is_check_enabled_doc,
             "is_check_enabled()\n--\n\n"
             "mkpy only: whether a `metal_kernel` call made now by this thread would be checked\n"
             "(see set_check).");

static PyObject *py_is_check_enabled(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(mkk_check_requested());
}

/* _check_scope(state) -> old state: -1 none, 0 off, 1 on (the thread's). */
static PyObject *py_check_scope(PyObject *self, PyObject *arg) {
    (void)self;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(mkk_check_scope(v < 0 ? -1 : v > 0));
}

PyMethodDef mkpy_check_functions[] = {
    {"set_check", py_set_check, METH_O, set_check_doc},
    {"is_check_enabled", py_is_check_enabled, METH_NOARGS, is_check_enabled_doc},
    {"_check_scope", py_check_scope, METH_O, NULL},
    {NULL},
};
