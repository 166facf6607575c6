/* mx.save, mx.load, mx.savez, mx.savez_compressed, mx.save_safetensors:
 * moving bytes between files (paths or objects with read/write) and the
 * format code in csrc/core/io.c. */
#include <stdio.h>
#include <string.h>

#include "core/io.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

static int is_path(PyObject *f) { return PyUnicode_Check(f) || PyObject_HasAttrString(f, "__fspath__"); }

/* The path as str, with ext appended when it does not already end with it. */
static PyObject *path_with_ext(PyObject *file, const char *ext) {
    PyObject *s = PyOS_FSPath(file), *r = NULL;
    if (!s) return NULL;
    if (!PyUnicode_Check(s)) {
        PyObject *d = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AsString(s), PyBytes_Size(s));
        Py_DECREF(s);
        if (!(s = d)) return NULL;
    }
    if (!ext) return s;
    PyObject *e = PyUnicode_FromString(ext);
    if (!e) goto done;
    int has = PyUnicode_Tailmatch(s, e, 0, PY_SSIZE_T_MAX, 1);
    if (has < 0) goto done;
    r = has ? Py_NewRef(s) : PyUnicode_Concat(s, e);
done:
    Py_XDECREF(e);
    Py_DECREF(s);
    return r;
}

/* Writes bytes to a path (str) or a file object with write(). */
static int write_out(PyObject *file, PyObject *path, const mk_bytes *b, const char *fname) {
    if (path) {
        PyObject *enc = NULL;
        if (!PyUnicode_FSConverter(path, &enc)) return -1;
        FILE *fp;
        size_t w = 0;
        int err = 0;
        Py_BEGIN_ALLOW_THREADS
        fp = fopen(PyBytes_AS_STRING(enc), "wb");
        if (fp) {
            w = b->len ? fwrite(b->data, 1, b->len, fp) : 0;
            err = fclose(fp) != 0 || w != b->len;
        }
        Py_END_ALLOW_THREADS
        Py_DECREF(enc);
        if (!fp || err) {
            PyErr_Format(PyExc_RuntimeError, "[%s] Failed to open or write file %U", fname, path);
            return -1;
        }
        return 0;
    }
    PyObject *mv = PyMemoryView_FromMemory((char *)(b->data ? b->data : (uint8_t *)""), (Py_ssize_t)b->len, PyBUF_READ);
    if (!mv) return -1;
    PyObject *r = PyObject_CallMethod(file, "write", "O", mv);
    Py_DECREF(mv);
    if (!r) return -1;
    Py_ssize_t n = r == Py_None ? (Py_ssize_t)b->len : PyLong_AsSsize_t(r);
    Py_DECREF(r);
    if (n < 0 && PyErr_Occurred()) return -1;
    if ((size_t)n < b->len) {
        PyErr_Format(PyExc_RuntimeError, "[%s] Failed to write to python stream", fname);
        return -1;
    }
    return 0;
}

/* The whole content of a path or file object (from its position) as bytes. */
static PyObject *read_in(PyObject *file, const char *fname) {
    if (is_path(file)) {
        PyObject *path = path_with_ext(file, NULL), *enc = NULL, *out = NULL;
        if (!path) return NULL;
        if (!PyUnicode_FSConverter(path, &enc)) goto done;
        FILE *fp;
        Py_BEGIN_ALLOW_THREADS
        fp = fopen(PyBytes_AS_STRING(enc), "rb");
        Py_END_ALLOW_THREADS
        if (!fp) {
            PyErr_Format(PyExc_ValueError, "[%s] Failed to open file %U", fname, path);
            goto done;
        }
        long size = -1;
        if (fseek(fp, 0, SEEK_END) == 0) size = ftell(fp);
        if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) {
            fclose(fp);
            PyErr_Format(PyExc_RuntimeError, "[%s] Could not read file %U", fname, path);
            goto done;
        }
        out = PyBytes_FromStringAndSize(NULL, size);
        if (out) {
            size_t got;
            Py_BEGIN_ALLOW_THREADS
            got = fread(PyBytes_AS_STRING(out), 1, (size_t)size, fp);
            Py_END_ALLOW_THREADS
            if (got != (size_t)size) {
                Py_CLEAR(out);
                PyErr_Format(PyExc_RuntimeError, "[%s] Could not read file %U", fname, path);
            }
        }
        fclose(fp);
    done:
        Py_XDECREF(enc);
        Py_DECREF(path);
        return out;
    }
    if (!PyObject_HasAttrString(file, "read")) {
        PyErr_Format(PyExc_ValueError, "[%s] Input must be a file-like object opened in binary mode, or string", fname);
        return NULL;
    }
    PyObject *b = PyObject_CallMethod(file, "read", NULL);
    if (b && !PyBytes_Check(b)) {
        PyObject *c = PyObject_IsInstance(b, (PyObject *)&PyUnicode_Type) ? NULL : PyBytes_FromObject(b);
        Py_DECREF(b);
        if (!c && !PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "[%s] Input must be a file-like object opened in binary mode, or string",
                         fname);
        b = c;
    }
    return b;
}

static mk_array *eval_arg(PyObject *o) {
    mk_array *a = mkpy_to_array(o, -1);
    if (!a) return NULL;
    if (mkpy_eval(&a, 1) < 0) {
        mk_decref(a);
        return NULL;
    }
    return a;
}

/* ------------------------------------------------------------------ save */

static PyObject *py_save(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"file", "arr", NULL};
    PyObject *v[2];
    if (mkpy_parse("save", args, nargs, kw, names, 2, v) < 0) return NULL;
    PyObject *path = NULL, *ret = NULL;
    mk_bytes b = {0};
    if (is_path(v[0])) {
        if (!(path = path_with_ext(v[0], ".npy"))) return NULL;
    } else if (!PyObject_HasAttrString(v[0], "write")) {
        PyErr_SetString(PyExc_ValueError, "[save] Input must be a file-like object, or string");
        return NULL;
    }
    mk_array *a = eval_arg(v[1]);
    if (!a) goto done;
    int rc = mk_npy_write(&b, a);
    mk_decref(a);
    if (rc < 0) {
        mkpy_raise();
        goto done;
    }
    if (write_out(v[0], path, &b, "save") < 0) goto done;
    ret = Py_NewRef(Py_None);
done:
    mk_bytes_free(&b);
    Py_XDECREF(path);
    return ret;
}

/* Collects positional arrays (arr_0, ...) then keyword ones. */
static PyObject *savez_impl(PyObject *args, PyObject *kwargs, int compress) {
    const char *fname = compress ? "savez_compressed" : "savez";
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'file' (pos 1)", fname);
        return NULL;
    }
    PyObject *file = PyTuple_GET_ITEM(args, 0), *path = NULL, *keys = PyList_New(0), *ret = NULL;
    Py_ssize_t nk = kwargs ? PyDict_GET_SIZE(kwargs) : 0, n = na - 1 + nk, cnt = 0;
    mk_array **arrs = PyMem_Calloc((size_t)n + 1, sizeof *arrs);
    const char **cnames = PyMem_Calloc((size_t)n + 1, sizeof *cnames);
    mk_bytes b = {0};
    if (!keys || !arrs || !cnames) {
        PyErr_NoMemory();
        goto done;
    }
    if (is_path(file)) {
        if (!(path = path_with_ext(file, ".npz"))) goto done;
    } else if (!PyObject_HasAttrString(file, "write")) {
        PyErr_Format(PyExc_ValueError, "[%s] Input must be a file-like object, or string", fname);
        goto done;
    }
    for (Py_ssize_t i = 1; i < na; i++) {
        PyObject *k = PyUnicode_FromFormat("arr_%zd", i - 1);
        if (!k) goto done;
        if (nk && PyDict_Contains(kwargs, k)) {
            PyErr_Format(PyExc_ValueError, "[savez] Cannot use un-named variables and keyword %U", k);
            Py_DECREF(k);
            goto done;
        }
        int rc = PyList_Append(keys, k);
        Py_DECREF(k);
        if (rc < 0 || !(arrs[cnt++] = eval_arg(PyTuple_GET_ITEM(args, i)))) goto done;
    }
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &k, &val)) {
        if (PyList_Append(keys, k) < 0 || !(arrs[cnt++] = eval_arg(val))) goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(cnames[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(keys, i)))) goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mk_npz_write(&b, (int)n, cnames, arrs, compress);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        mkpy_raise();
        goto done;
    }
    if (write_out(file, path, &b, fname) < 0) goto done;
    ret = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; arrs && i < cnt; i++) mk_xdecref(arrs[i]);
    PyMem_Free(arrs);
    PyMem_Free(cnames);
    mk_bytes_free(&b);
    Py_XDECREF(keys);
    Py_XDECREF(path);
    return ret;
}

static PyObject *py_savez(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs) {
    return savez_impl(args, kwargs, 0);
}
static PyObject *py_savez_compressed(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs) {
    return savez_impl(args, kwargs, 1);
}

/* --------------------------------------------------------- safetensors */

static PyObject *py_save_safetensors(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"file", "arrays", "metadata", NULL};
    PyObject *v[3];
    if (mkpy_parse("save_safetensors", args, nargs, kw, names, 2, v) < 0) return NULL;
    PyObject *file = v[0], *arrays = v[1], *meta = v[2] == Py_None ? NULL : v[2], *path = NULL, *ret = NULL;
    if (!PyDict_Check(arrays)) {
        PyErr_SetString(PyExc_TypeError, "save_safetensors(): arrays must be a dict of str to array");
        return NULL;
    }
    if (meta && !PyDict_Check(meta)) {
        PyErr_SetString(PyExc_ValueError,
                        "[save_safetensors] Metadata must be a dictionary with string keys and values");
        return NULL;
    }
    Py_ssize_t n = PyDict_GET_SIZE(arrays), nm = meta ? PyDict_GET_SIZE(meta) : 0, cnt = 0;
    mk_array **arrs = PyMem_Calloc((size_t)n + 1, sizeof *arrs);
    const char **cn = PyMem_Calloc((size_t)(n + 2 * nm) + 1, sizeof *cn);
    mk_bytes b = {0};
    if (!arrs || !cn) {
        PyErr_NoMemory();
        goto done;
    }
    if (is_path(file)) {
        if (!(path = path_with_ext(file, ".safetensors"))) goto done;
    } else if (!PyObject_HasAttrString(file, "write")) {
        PyErr_SetString(PyExc_ValueError, "[save_safetensors] Input must be a file-like object, or string");
        goto done;
    }
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(arrays, &pos, &k, &val)) {
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "save_safetensors(): array names must be str");
            goto done;
        }
        if (!(cn[cnt] = PyUnicode_AsUTF8(k)) || !(arrs[cnt] = eval_arg(val))) goto done;
        cnt++;
    }
    pos = 0;
    for (Py_ssize_t i = 0; meta && PyDict_Next(meta, &pos, &k, &val); i++) {
        if (!PyUnicode_Check(k) || !PyUnicode_Check(val)) {
            PyErr_SetString(PyExc_ValueError,
                            "[save_safetensors] Metadata must be a dictionary with string keys and values");
            goto done;
        }
        if (!(cn[n + i] = PyUnicode_AsUTF8(k)) || !(cn[n + nm + i] = PyUnicode_AsUTF8(val))) goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mk_safetensors_write(&b, (int)n, cn, arrs, (int)nm, cn + n, cn + n + nm);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        mkpy_raise();
        goto done;
    }
    if (write_out(file, path, &b, "save_safetensors") < 0) goto done;
    ret = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; arrs && i < cnt; i++) mk_xdecref(arrs[i]);
    PyMem_Free(arrs);
    PyMem_Free(cn);
    mk_bytes_free(&b);
    Py_XDECREF(path);
    return ret;
}

/* ---------------------------------------------------------------- GGUF */

static PyObject *py_save_gguf(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"file", "arrays", "metadata", NULL};
    PyObject *v[3];
    if (mkpy_parse("save_gguf", args, nargs, kw, names, 2, v) < 0) return NULL;
    PyObject *file = v[0], *arrays = v[1], *meta = v[2] == Py_None ? NULL : v[2], *path = NULL, *ret = NULL;
    if (!is_path(file)) {
        PyErr_SetString(PyExc_ValueError, "[save_gguf] Input must be a string");
        return NULL;
    }
    if (!PyDict_Check(arrays) || (meta && !PyDict_Check(meta))) {
        PyErr_SetString(PyExc_TypeError, "save_gguf(): arrays and metadata must be dicts keyed by str");
        return NULL;
    }
    Py_ssize_t n = PyDict_GET_SIZE(arrays), nm = meta ? PyDict_GET_SIZE(meta) : 0, cnt = 0, km = 0;
    mk_array **arrs = PyMem_Calloc((size_t)n + 1, sizeof *arrs);
    const char **cn = PyMem_Calloc((size_t)n + 1, sizeof *cn);
    mk_gguf_kv *kvs = PyMem_Calloc((size_t)nm + 1, sizeof *kvs);
    mk_bytes b = {0};
    if (!arrs || !cn || !kvs) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(path = path_with_ext(file, ".gguf"))) goto done;
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(arrays, &pos, &k, &val)) {
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "save_gguf(): array names must be str");
            goto done;
        }
        if (!(cn[cnt] = PyUnicode_AsUTF8(k)) || !(arrs[cnt] = eval_arg(val))) goto done;
        cnt++;
    }
    pos = 0;
    /* keys and strings borrow the dict's UTF-8 buffers (the struct's char * are not freed here) */
    for (; meta && PyDict_Next(meta, &pos, &k, &val); km++) {
        mk_gguf_kv *kv = &kvs[km];
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "save_gguf(): metadata keys must be str");
            goto done;
        }
        if (!(kv->key = (char *)PyUnicode_AsUTF8(k))) goto done;
        if (PyUnicode_Check(val)) {
            kv->kind = MK_GGUF_STR;
            if (!(kv->str = (char *)PyUnicode_AsUTF8(val))) goto done;
        } else if (PyList_Check(val) && PyList_GET_SIZE(val) > 0 && PyUnicode_Check(PyList_GET_ITEM(val, 0))) {
            kv->kind = MK_GGUF_STRS;
            kv->nstrs = PyList_GET_SIZE(val);
            if (!(kv->strs = PyMem_Calloc((size_t)kv->nstrs, sizeof *kv->strs))) {
                PyErr_NoMemory();
                goto done;
            }
            for (Py_ssize_t j = 0; j < kv->nstrs; j++) {
                PyObject *s = PyList_GET_ITEM(val, j);
                if (!PyUnicode_Check(s)) {
                    PyErr_SetString(PyExc_RuntimeError, "[save_gguf] Received unexpected type in metadata");
                    goto done;
                }
                if (!(kv->strs[j] = (char *)PyUnicode_AsUTF8(s))) goto done;
            }
        } else {
            kv->kind = MK_GGUF_ARRAY;
            if (!PyMkArray_Check(val)) {
                PyErr_SetString(PyExc_RuntimeError, "[save_gguf] Received unexpected type in metadata");
                goto done;
            }
            if (!(kv->arr = eval_arg(val))) goto done;
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mk_gguf_write(&b, (int)n, cn, arrs, (int)km, kvs);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        mkpy_raise();
        goto done;
    }
    if (write_out(file, path, &b, "save_gguf") < 0) goto done;
    ret = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; arrs && i < cnt; i++) mk_xdecref(arrs[i]);
    for (Py_ssize_t i = 0; kvs && i <= km && i < nm; i++) {
        PyMem_Free(kvs[i].strs);
        mk_xdecref(kvs[i].arr);
    }
    PyMem_Free(arrs);
    PyMem_Free(cn);
    PyMem_Free(kvs);
    mk_bytes_free(&b);
    Py_XDECREF(path);
    return ret;
}

static PyObject *gguf_meta_dict(mk_gguf_kv *kvs, int nkv) {
    PyObject *r = PyDict_New();
    for (int i = 0; r && i < nkv; i++) {
        PyObject *v = NULL;
        if (kvs[i].kind == MK_GGUF_STR) {
            v = PyUnicode_DecodeUTF8(kvs[i].str, (Py_ssize_t)strlen(kvs[i].str), "replace");
        } else if (kvs[i].kind == MK_GGUF_STRS) {
            v = PyList_New((Py_ssize_t)kvs[i].nstrs);
            for (int64_t j = 0; v && j < kvs[i].nstrs; j++) {
                PyObject *s = PyUnicode_DecodeUTF8(kvs[i].strs[j], (Py_ssize_t)strlen(kvs[i].strs[j]), "replace");
                if (!s) Py_CLEAR(v);
                else PyList_SET_ITEM(v, (Py_ssize_t)j, s);
            }
        } else {
            v = mkpy_wrap(kvs[i].arr);
            kvs[i].arr = NULL;
        }
        PyObject *key = v ? PyUnicode_DecodeUTF8(kvs[i].key, (Py_ssize_t)strlen(kvs[i].key), "replace") : NULL;
        if (!key || PyDict_SetItem(r, key, v) < 0) Py_CLEAR(r);
        Py_XDECREF(key);
        Py_XDECREF(v);
    }
    return r;
}

/* ------------------------------------------------------------------ load */

static PyObject *named_dict(mk_named *d) {
    PyObject *r = PyDict_New();
    if (!r) return NULL;
    for (int i = 0; i < d->n; i++) {
        PyObject *a = mkpy_wrap(d->arrays[i]);
        d->arrays[i] = NULL;
        if (!a || PyDict_SetItemString(r, d->names[i], a) < 0) {
            Py_XDECREF(a);
            Py_DECREF(r);
            return NULL;
        }
        Py_DECREF(a);
    }
    return r;
}

static PyObject *meta_dict(const mk_named *d) {
    PyObject *r = PyDict_New();
    for (int i = 0; r && i < d->nmeta; i++) {
        PyObject *s = PyUnicode_FromString(d->meta_values[i]);
        if (!s || PyDict_SetItemString(r, d->meta_keys[i], s) < 0) Py_CLEAR(r);
        Py_XDECREF(s);
    }
    return r;
}

MKPY_STREAM_BINDING(py_load)(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"file", "format", "return_metadata", "*stream", NULL};
    PyObject *v[4];
    if (mkpy_parse("load", args, nargs, kw, names, 1, v) < 0) return NULL;
    PyObject *file = v[0], *fmt = v[1] && v[1] != Py_None ? Py_NewRef(v[1]) : NULL, *data = NULL, *ret = NULL;
    int want_meta;
    if (mkpy_parse_bool(v[2], 0, &want_meta) < 0) goto done;
    if (!fmt) {
        PyObject *name = is_path(file) ? path_with_ext(file, NULL) : NULL;
        if (!name && !is_path(file)) {
            if (!PyObject_HasAttrString(file, "read")) {
                PyErr_SetString(PyExc_ValueError,
                                "[load] Input must be a file-like object opened in binary mode, or string");
                goto done;
            }
            name = PyObject_GetAttrString(file, "name");
            if (name && !PyUnicode_Check(name)) Py_CLEAR(name);
            if (!name) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "[load] Could not infer file format from extension");
                goto done;
            }
        }
        if (!name) goto done;
        Py_ssize_t dot = PyUnicode_FindChar(name, '.', 0, PY_SSIZE_T_MAX, -1);
        if (dot < 0) {
            if (dot == -1) PyErr_SetString(PyExc_ValueError, "[load] Could not infer file format from extension");
            Py_DECREF(name);
            goto done;
        }
        fmt = PyUnicode_Substring(name, dot + 1, PY_SSIZE_T_MAX);
        Py_DECREF(name);
        if (!fmt) goto done;
    }
    const char *f = PyUnicode_Check(fmt) ? PyUnicode_AsUTF8(fmt) : NULL;
    if (!f) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "load(): format must be a str or None");
        goto done;
    }
    int is_npy = !strcmp(f, "npy"), is_npz = !strcmp(f, "npz"), is_st = !strcmp(f, "safetensors");
    int is_gguf = !strcmp(f, "gguf");
    if (!is_npy && !is_npz && !is_st && !is_gguf) {
        PyErr_Format(PyExc_ValueError, "[load] Unknown file format %s", f);
        goto done;
    }
    if (want_meta && (is_npy || is_npz)) {
        PyErr_Format(PyExc_ValueError, "[load] metadata not supported for format %s", f);
        goto done;
    }
    if (!(data = read_in(file, "load"))) goto done;
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(data);
    size_t n = (size_t)PyBytes_GET_SIZE(data);
    if (is_npy) {
        /* read on eval, as MLX's: the node keeps the bytes (io.h) */
        mk_array *a = NULL;
        mk_blob *blob;
        /* MLX loads on the CPU's default stream unless stream= names one */
        bool own = mk_stream_override() == MK_STREAM_NONE;
        mk_stream prev = own ? mk_stream_scope(mk_default_stream(MK_CPU)) : MK_STREAM_NONE;
        Py_BEGIN_ALLOW_THREADS
        if ((blob = mk_blob_new(n))) {
            memcpy(blob->data, p, n);
            a = mk_npy_read_lazy(blob);
            mk_blob_decref(blob);
        }
        Py_END_ALLOW_THREADS
        if (own) mk_stream_scope(prev);
        ret = mkpy_wrap(a);
        goto done;
    }
    mk_named d;
    int rc;
    if (is_gguf) {
        mk_gguf_kv *kvs;
        int nkv;
        Py_BEGIN_ALLOW_THREADS
        rc = mk_gguf_read(p, n, &d, &kvs, &nkv);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            mkpy_raise();
            goto done;
        }
        PyObject *dict = named_dict(&d), *md = dict && want_meta ? gguf_meta_dict(kvs, nkv) : NULL;
        mk_named_free(&d);
        mk_gguf_kvs_free(kvs, nkv);
        if (want_meta) {
            ret = dict && md ? PyTuple_Pack(2, dict, md) : NULL;
            Py_XDECREF(dict);
            Py_XDECREF(md);
        } else {
            ret = dict;
        }
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = is_npz ? mk_npz_read(p, n, &d) : mk_safetensors_read(p, n, &d);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        mkpy_raise();
        goto done;
    }
    PyObject *dict = named_dict(&d), *md = dict && want_meta ? meta_dict(&d) : NULL;
    mk_named_free(&d);
    if (want_meta) {
        ret = dict && md ? PyTuple_Pack(2, dict, md) : NULL;
        Py_XDECREF(dict);
        Py_XDECREF(md);
    } else {
        ret = dict;
    }
done:
    Py_XDECREF(fmt);
    Py_XDECREF(data);
    return ret;
}

PyMethodDef mkpy_io_functions[] = {
    {"save", FN(py_save), FASTKW,
     "save(file, arr)\n--\n\n"
     "Saves an array to a binary file in .npy format (\".npy\" is appended to a path that lacks it);\n"
     "file may be a path or a file object with write()."},
    {"load", FN(py_load), FASTKW,
     "load(file, /, format=None, return_metadata=False, *, stream=None)\n--\n\n"
     "Loads arrays from a .npy, .npz, .safetensors or .gguf file (a path or a binary file object). The\n"
     "format comes from the extension unless given. .npy gives an array; the others a\n"
     "dict; return_metadata=True (safetensors, gguf) gives (dict, metadata)."},
    {"savez", FN(py_savez), METH_VARARGS | METH_KEYWORDS,
     "savez(file, *args, **kwargs)\n--\n\n"
     "Saves several arrays to an uncompressed .npz archive: positional arrays as arr_0, arr_1, ...,\n"
     "keyword arrays under their names (\".npz\" is appended to a path that lacks it)."},
    {"savez_compressed", FN(py_savez_compressed), METH_VARARGS | METH_KEYWORDS,
     "savez_compressed(file, *args, **kwargs)\n--\n\n"
     "As savez, with each member deflate-compressed (zlib)."},
    {"save_safetensors", FN(py_save_safetensors), FASTKW,
     "save_safetensors(file, arrays, metadata=None)\n--\n\n"
     "Saves a dict of arrays to a .safetensors file (\".safetensors\" is appended to a path that\n"
     "lacks it), with optional str -> str metadata."},
    {"save_gguf", FN(py_save_gguf), FASTKW,
     "save_gguf(file, arrays, metadata=None)\n--\n\n"
     "Saves a dict of arrays (float32, float16, int8, int16, int32) to a .gguf file (\".gguf\" is\n"
     "appended to a path that lacks it), with metadata values that are str, list of str, or arrays\n"
     "(0-d for a scalar, 1-d for a GGUF array)."},
    {NULL, NULL, 0, NULL},
};
