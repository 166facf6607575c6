/* The extension module mkpy._core: its functions come from the per-family
 * tables; mkpy.random, mkpy.fast and mkpy.metal are submodule objects that
 * the Python package re-exports. */
#include "core/pool.h"
#include "backend/backend.h"
#include "mkpy.h"
#include "py_tree.h" /* grad & co., custom_function, compile */

extern PyMethodDef mkpy_dtype_functions[];
extern PyMethodDef mkpy_kernel_cache_functions[];
extern PyMethodDef mkpy_check_functions[]; /* py_check.c */
extern PyMethodDef mkpy_debug_functions[]; /* py_debug.c */
extern PyMethodDef mkpy_transforms_functions[];
extern PyMethodDef mkpy_fft_functions[];  /* py_fft.c: the mkpy.fft submodule */
extern PyMethodDef mkpy_conv_functions[]; /* py_conv.c: conv1d/2d/3d, conv_general, conv_transpose*, convolve */
int mkpy_dtype_init(PyObject *m);
int mkpy_fast_init(void);
int mkpy_distributed_init(PyObject *m); /* py_distributed.c: mkpy.distributed, mkpy.cuda */
extern PyMethodDef mkpy_extra_functions[]; /* py_extra.c */
extern PyMethodDef mkpy_dot_functions[]; /* py_dot.c: export_to_dot */
int mkpy_export_init(PyObject *m);          /* py_export.c */
int mkpy_extra_init(PyObject *m);
int mkpy_stream_init(PyObject *m);   /* py_stream.c: Device, Stream, default_stream, ... */

static PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mkpy._core",
    .m_doc = "mkpy's C core: MLX's array API and Metal kernels on the CPU.",
    .m_size = -1,
};

static int add_submodule(PyObject *m, const char *name, PyMethodDef *fns) {
    char full[64];
    PyOS_snprintf(full, sizeof full, "mkpy._core.%s", name);
    PyObject *sub = PyModule_New(full);
    if (!sub) return -1;
    if (PyModule_AddFunctions(sub, fns) < 0 || PyModule_AddObjectRef(m, name, sub) < 0) {
        Py_DECREF(sub);
        return -1;
    }
    Py_DECREF(sub);
    return 0;
}

PyMODINIT_FUNC PyInit__core(void) {
    PyObject *m = PyModule_Create(&core_module);
    if (!m) return NULL;
    mkpy_module = m;
    if (PyType_Ready(&PyMkArray_Type) < 0) goto error;
    if (PyModule_AddObjectRef(m, "array", (PyObject *)&PyMkArray_Type) < 0) goto error;
    if (mkpy_dtype_init(m) < 0) goto error;
    if (mkpy_indexops_init(m) < 0) goto error;
    PyMethodDef *tables[] = {mkpy_dtype_functions,  mkpy_ops_functions,   mkpy_device_functions,
                             mkpy_reduce_functions, mkpy_shape_functions, mkpy_create_functions,
                             mkpy_linalg_functions, mkpy_sort_functions,  mkpy_indexops_functions,
                             mkpy_transforms_functions,
                             mkpy_io_functions,
                             mkpy_quant_functions};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        if (PyModule_AddFunctions(m, tables[i]) < 0) goto error;
    if (add_submodule(m, "random", mkpy_random_functions) < 0) goto error;
    if (add_submodule(m, "fft", mkpy_fft_functions) < 0) goto error;
    if (PyModule_AddFunctions(m, mkpy_conv_functions) < 0) goto error;
    if (add_submodule(m, "fast", mkpy_fast_functions) < 0) goto error;
    {
        PyObject *fast = PyObject_GetAttrString(m, "fast");
        int frc = fast ? PyModule_AddFunctions(fast, mkpy_fastops_functions) : -1;
        Py_XDECREF(fast);
        if (frc < 0) goto error;
    }
    if (add_submodule(m, "metal", mkpy_metal_functions) < 0) goto error;
    if (add_submodule(m, "linalg", mkpy_linalg_ns_functions) < 0) goto error;
    if (PyModule_AddFunctions(m, mkpy_einsum_functions) < 0) goto error;
    if (PyModule_AddFunctions(m, mkpy_dot_functions) < 0) goto error;
    if (mkpy_fast_init() < 0) goto error;
    if (mkpy_distributed_init(m) < 0) goto error;
    if (PyModule_AddFunctions(m, mkpy_extra_functions) < 0 || mkpy_extra_init(m) < 0) goto error;
    if (mkpy_export_init(m) < 0) goto error;
    PyObject *metal = PyObject_GetAttrString(m, "metal");
    int rc = metal ? PyModule_AddFunctions(metal, mkpy_kernel_cache_functions) : -1;
    if (rc == 0) rc = PyModule_AddFunctions(metal, mkpy_check_functions);
    if (rc == 0) rc = PyModule_AddFunctions(metal, mkpy_debug_functions);
    Py_XDECREF(metal);
    if (rc < 0) goto error;
    if (mkpy_grad_init(m) < 0 || PyModule_AddFunctions(m, mkpy_grad_functions) < 0) goto error;
    if (mkpy_custom_init(m) < 0) goto error;
    if (mkpy_compile_init(m) < 0 || PyModule_AddFunctions(m, mkpy_compile_functions) < 0) goto error;
    if (mkpy_stream_init(m) < 0) goto error;
    /* the GPU back-end is chosen before any node is evaluated (backend/backend.c):
     * loads the CUDA driver where there is one, nothing else elsewhere */
    mkb_gpu();
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
