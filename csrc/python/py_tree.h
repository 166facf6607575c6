/* Pytrees for the function transformations (py_tree.c): the one walk over
 * nested lists, tuples (named tuples and other subclasses included) and
 * dicts whose leaves are arrays, shared by grad, vjp, jvp, vmap, checkpoint,
 * custom_function (py_grad.c, py_custom.c) and compile (py_compile.c); and
 * a small closure type through which these hand C state to the flat
 * transformations of py_transforms.c, which call a Python callable. */
#ifndef MKPY_PY_TREE_H
#define MKPY_PY_TREE_H

#include "mkpy.h"

/* Appends the arrays of tree to the list out, depth first. strict: any other
 * leaf raises MLX's "[tree_flatten] The argument should contain only
 * arrays". Returns 0 or -1. */
int mkpy_tree_flatten(PyObject *tree, int strict, PyObject *out);
/* A new tree shaped as tree whose arrays are replaced, in order, by
 * leaves[*pos], leaves[*pos + 1], ... (a list). Lists and dicts are new
 * (plain) containers; tuples keep their type; other leaves stay. */
PyObject *mkpy_tree_fill(PyObject *tree, PyObject *leaves, Py_ssize_t *pos);
/* mkpy_tree_fill, but lists and dicts are updated in place (MLX's
 * tree_fill); returns a new reference to the (possibly same) tree. */
PyObject *mkpy_tree_fill_inplace(PyObject *tree, PyObject *leaves, Py_ssize_t *pos);
/* Replaces, in place where possible, each array leaf by fn(ctx, leaf) (a
 * new reference, NULL: error). Returns a new reference to the tree. */
typedef PyObject *(*mkpy_leaf_fn)(void *ctx, PyObject *leaf);
PyObject *mkpy_tree_update(PyObject *tree, mkpy_leaf_fn fn, void *ctx);
/* A copy of tree (plain lists, tuples and dicts) with every non-container
 * leaf replaced by fn(ctx, leaf). */
PyObject *mkpy_tree_map_leaves(PyObject *tree, mkpy_leaf_fn fn, void *ctx);
/* A tuple of tree's type from the list items: named tuples take the items
 * as fields, other tuple subclasses as one iterable. */
PyObject *mkpy_tree_rebuild_tuple(PyObject *tree, PyObject *items);
/* mx.compile's signature: appends the arrays to `arrays` and a hashable
 * description (structure, dtypes, shapes or with shapeless only ndims, and
 * the constants) to the list `key`; refuses other leaves with MLX's
 * "[compile] Function arguments must be trees of arrays or constants ...". */
int mkpy_tree_signature(PyObject *tree, PyObject *arrays, PyObject *key, int shapeless);
/* The type name MLX prints ("list", "__main__.Foo"). */
PyObject *mkpy_tree_type_name(PyObject *o);

/* ------------------------------------------------------------ closures */

/* A callable carrying C state: calling it calls fn(self, args, nargs) (no
 * keywords). s[] are owned references (NULL allowed), seen by the GC; i[]
 * plain integers. */
#define MKPY_CLOSURE_SLOTS 8
typedef struct mkpy_closure mkpy_closure;
typedef PyObject *(*mkpy_closure_fn)(mkpy_closure *self, PyObject *const *args, Py_ssize_t nargs);
struct mkpy_closure {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    mkpy_closure_fn fn;
    PyObject *s[MKPY_CLOSURE_SLOTS];
    Py_ssize_t i[4];
};
/* A new closure; its slots start NULL. */
mkpy_closure *mkpy_closure_new(mkpy_closure_fn fn);
/* Sets slot k to a new reference to v (v may be NULL), dropping the old. */
void mkpy_closure_set(mkpy_closure *c, int k, PyObject *v);

/* ---------------------------------------------------- wrapped functions */

/* Copies fun's __module__, __name__, __qualname__, __doc__ and __dict__
 * into the instance dict *dict (created on demand) and sets __wrapped__, as
 * functools.update_wrapper; attributes fun lacks are skipped. */
int mkpy_update_wrapper(PyObject **dict, PyObject *fun);

/* ---------------------------------------------- flat transformations */

/* py_transforms.c's flat entry points (fun takes and returns a list of arrays). */
PyObject *mkpy_vjp_flat(PyObject *fun, PyObject *primals, PyObject *cotangents, PyObject *argnums);
PyObject *mkpy_jvp_flat(PyObject *fun, PyObject *primals, PyObject *tangents);
PyObject *mkpy_vmap_flat(PyObject *fun, PyObject *inputs, PyObject *in_axes);
PyObject *mkpy_custom_flat(PyObject *fun, PyObject *inputs, PyObject *vjp, PyObject *jvp, PyObject *vmap);

extern PyTypeObject mkpy_closure_Type;

/* Module functions and types (module.c): grad, value_and_grad, vjp, jvp,
 * vmap, checkpoint (py_grad.c); custom_function (py_custom.c); compile,
 * disable_compile, enable_compile (py_compile.c). */
extern PyMethodDef mkpy_grad_functions[];
extern PyMethodDef mkpy_compile_functions[];
int mkpy_grad_init(PyObject *m);
int mkpy_custom_init(PyObject *m);
int mkpy_compile_init(PyObject *m);

#endif
