/* mkpy.Dtype and mkpy.DtypeCategory: one immutable object per dtype and per
 * category, created at import. */
#include "mkpy.h"

static PyMkDtype dtype_objects[MK_NDTYPES];
static PyMkCategory category_objects[MK_NCATS];

PyObject *mkpy_dtype_object(mk_dtype t) { return (PyObject *)&dtype_objects[t]; }
PyObject *mkpy_category_object(mk_category c) { return (PyObject *)&category_objects[c]; }

/* The module name that reprs and type names print: "mkpy", or "mlx.core" once the stand-in mode
   (mkpy.as_mlx) is on, as MLX's tests compare str(mx.float32) with "mlx.core.float32". */
const char *mkpy_public_name = "mkpy";

static PyObject *dtype_repr(PyMkDtype *self) {
    return PyUnicode_FromFormat("%s.%s", mkpy_public_name, mk_dtype_name(self->dtype));
}

PyDoc_STRVAR(set_public_name_doc, "_set_public_name(name)\n--\n\n"
                                  "The module name printed by dtype reprs and type names in messages: "
                                  "'mkpy' or 'mlx.core' (mkpy.as_mlx).");

static PyObject *py_set_public_name(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (name && !strcmp(name, "mkpy")) mkpy_public_name = "mkpy";
    else if (name && !strcmp(name, "mlx.core")) mkpy_public_name = "mlx.core";
    else {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_set_public_name: 'mkpy' or 'mlx.core'");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *dtype_size(PyMkDtype *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(mk_dtype_size(self->dtype));
}

static Py_hash_t dtype_hash(PyMkDtype *self) { return (Py_hash_t)self->dtype + 1000003; }

static PyObject *dtype_richcompare(PyObject *a, PyObject *b, int op) {
    if (!PyMkDtype_Check(a) || !PyMkDtype_Check(b) || (op != Py_EQ && op != Py_NE)) Py_RETURN_NOTIMPLEMENTED;
    int eq = ((PyMkDtype *)a)->dtype == ((PyMkDtype *)b)->dtype;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *dtype_reduce(PyMkDtype *self, PyObject *unused) {
    (void)unused;
    /* pickles as the module attribute of the same name */
    const char *name = self->dtype == MK_BOOL ? "bool_" : mk_dtype_name(self->dtype);
    return PyUnicode_FromString(name);
}

static PyGetSetDef dtype_getset[] = {
    {"size", (getter)dtype_size, NULL, "Size of one element in bytes.", NULL},
    {NULL},
};

static PyMethodDef dtype_methods[] = {
    {"__reduce__", (PyCFunction)dtype_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyDoc_STRVAR(dtype_doc, "An array element type, such as mkpy.float32.");

PyTypeObject PyMkDtype_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.Dtype",
    .tp_basicsize = sizeof(PyMkDtype),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = dtype_doc,
    .tp_repr = (reprfunc)dtype_repr,
    .tp_hash = (hashfunc)dtype_hash,
    .tp_richcompare = dtype_richcompare,
    .tp_getset = dtype_getset,
    .tp_methods = dtype_methods,
};

static PyObject *category_repr(PyMkCategory *self) {
    return PyUnicode_FromFormat("DtypeCategory.%s", mk_category_names[self->cat]);
}

static PyObject *category_reduce(PyMkCategory *self, PyObject *unused) {
    (void)unused;
    return PyUnicode_FromString(mk_category_names[self->cat]);
}

static PyObject *category_name(PyMkCategory *self, void *closure) {
    (void)closure;
    return PyUnicode_FromString(mk_category_names[self->cat]);
}

static PyObject *category_value(PyMkCategory *self, void *closure) {
    (void)closure;
    return PyLong_FromLong((long)self->cat);
}

static PyGetSetDef category_getset[] = {
    {"name", (getter)category_name, NULL, "The category's name.", NULL},
    {"value", (getter)category_value, NULL, "The category's value (MLX's numbering).", NULL},
    {NULL},
};

static PyMethodDef category_methods[] = {
    {"__reduce__", (PyCFunction)category_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyTypeObject PyMkCategory_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.DtypeCategory",
    .tp_basicsize = sizeof(PyMkCategory),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A category of dtypes (mkpy.floating, mkpy.integer, ...), for issubdtype.",
    .tp_repr = (reprfunc)category_repr,
    .tp_methods = category_methods,
    .tp_getset = category_getset,
};

/* issubdtype(a, b): a and b are each a Dtype or a DtypeCategory. */
static int as_category(PyObject *o, int *is_dtype, int *value) {
    if (PyMkDtype_Check(o)) {
        *is_dtype = 1;
        *value = ((PyMkDtype *)o)->dtype;
        return 0;
    }
    if (PyObject_TypeCheck(o, &PyMkCategory_Type)) {
        *is_dtype = 0;
        *value = ((PyMkCategory *)o)->cat;
        return 0;
    }
    return -1;
}

PyDoc_STRVAR(issubdtype_doc, "issubdtype(arg1, arg2)\n--\n\n"
                             "Whether arg1 (a Dtype or DtypeCategory) is arg2 or falls under it.");

static PyObject *py_issubdtype(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "issubdtype() takes exactly 2 arguments");
        return NULL;
    }
    int da, va, db, vb;
    for (int i = 0; i < 2; i++)
        if (as_category(args[i], i ? &db : &da, i ? &vb : &va) < 0) {
            PyErr_Format(PyExc_ValueError, "[issubdtype] Received invalid type for %s input.", i ? "second" : "first");
            return NULL;
        }
    int r;
    if (da && db)
        r = va == vb;
    else if (da)
        r = mk_issubdtype_cat((mk_dtype)va, (mk_category)vb);
    else if (db)
        r = 0;
    else
        r = mk_subcat((mk_category)va, (mk_category)vb);
    return PyBool_FromLong(r);
}

PyMethodDef mkpy_dtype_functions[] = {
    {"issubdtype", (PyCFunction)(void (*)(void))py_issubdtype, METH_FASTCALL, issubdtype_doc},
    {"_set_public_name", (PyCFunction)py_set_public_name, METH_O, set_public_name_doc},
    {NULL},
};

int mkpy_dtype_init(PyObject *m) {
    if (PyType_Ready(&PyMkDtype_Type) < 0 || PyType_Ready(&PyMkCategory_Type) < 0) return -1;
    for (int i = 0; i < MK_NDTYPES; i++) {
        PyObject *o = (PyObject *)&dtype_objects[i];
        PyObject_Init(o, &PyMkDtype_Type);
        Py_SET_REFCNT(o, 1 << 28); /* immortal enough: static storage */
        dtype_objects[i].dtype = (mk_dtype)i;
        /* bool is exported as bool_ only, so `from mkpy import *` keeps the builtin */
        if (i != MK_BOOL && PyModule_AddObjectRef(m, mk_dtype_name((mk_dtype)i), o) < 0) return -1;
    }
    if (PyModule_AddObjectRef(m, "bool_", mkpy_dtype_object(MK_BOOL)) < 0) return -1;
    for (int i = 0; i < MK_NCATS; i++) {
        PyObject *o = (PyObject *)&category_objects[i];
        PyObject_Init(o, &PyMkCategory_Type);
        Py_SET_REFCNT(o, 1 << 28);
        category_objects[i].cat = (mk_category)i;
        if (PyModule_AddObjectRef(m, mk_category_names[i], o) < 0) return -1;
        /* DtypeCategory.floating, as MLX's enum members */
        if (PyDict_SetItemString(PyMkCategory_Type.tp_dict, mk_category_names[i], o) < 0) return -1;
    }
    PyType_Modified(&PyMkCategory_Type);
    if (PyModule_AddObjectRef(m, "Dtype", (PyObject *)&PyMkDtype_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "DtypeCategory", (PyObject *)&PyMkCategory_Type) < 0) return -1;
    return 0;
}
