/* matmul on the GPU through cuBLAS, loaded with dlopen at run time (as MLX
 * loads its CUDA libraries): no build dependency, and a machine without it
 * runs matmul on the CPU. One cublasGemmStridedBatchedEx per node, in
 * float accumulation (CUBLAS_COMPUTE_32F: no TF32, so float32 products are
 * float32 products, as on the CPU; float16/bfloat16 are accumulated in
 * float and rounded once, as MLX's CPU gemm). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "driver.h"
#include "ops_cuda.h"

typedef void *cublasHandle_t;
typedef int cublasStatus_t;
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };

static struct {
    pthread_once_t once;
    void *lib;
    char why[256];
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*gemm)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,
                           long long, const void *, int, int, long long, const void *, void *, int, int, long long,
                           int, int, int);
} bl = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
    const char *names[] = {getenv("MKPY_LIBCUBLAS"), "libcublas.so.13", "libcublas.so.12", "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !bl.lib; i++)
        if (names[i] && *names[i]) bl.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!bl.lib) {
        snprintf(bl.why, sizeof bl.why, "cuBLAS not found (libcublas.so.13/.12; MKPY_LIBCUBLAS names another)");
        return;
    }
    *(void **)&bl.create = dlsym(bl.lib, "cublasCreate_v2");
    *(void **)&bl.gemm = dlsym(bl.lib, "cublasGemmStridedBatchedEx");
    if (!bl.create || !bl.gemm) snprintf(bl.why, sizeof bl.why, "cuBLAS lacks cublasGemmStridedBatchedEx");
}

const char *mkb_cublas_why(void) {
    pthread_once(&bl.once, load);
    return bl.why;
}

/* cuBLAS handles are per thread (a handle is not for concurrent use). */
static _Thread_local cublasHandle_t handle;
static _Thread_local unsigned handle_gen;

/* This thread's handle in the current context. Returns 0, or -1 with an error. */
static int get_handle(const char *what) {
    if (mkb_cuda_enter() < 0) return -1;
    if (!handle || handle_gen != mkb_cuda_generation()) {
        if (bl.create(&handle) != 0) {
            mk_error_set(MK_ERR_RUNTIME, "[%s] cublasCreate failed on the GPU.", what);
            return -1;
        }
        handle_gen = mkb_cuda_generation();
    }
    return 0;
}

static int cuda_type(mk_dtype t) {
    return t == MK_FLOAT32 ? CUDA_R_32F : t == MK_FLOAT16 ? CUDA_R_16F : t == MK_BFLOAT16 ? CUDA_R_16BF : -1;
}

/* A matrix operand as cuBLAS takes it: its rows and columns as one of its
 * two layouts (row-major: ld = row stride; column-major: a transposed view),
 * and one batch stride over the output's batch dims, which must collapse
 * (each dim's stride the next one's times its size, or 0 for all). */
typedef struct {
    bool trans; /* column-major in memory */
    int64_t ld, batch_stride;
} layout;

static bool operand_layout(const mk_array *x, const mk_array *o, layout *L) {
    int nd = x->ndim;
    int64_t rs = x->strides[nd - 2], cs = x->strides[nd - 1], R = x->shape[nd - 2], C = x->shape[nd - 1];
    if ((cs == 1 || C == 1) && rs >= (C > 1 ? C : 1)) {
        L->trans = false;
        L->ld = rs > 0 ? rs : (C > 0 ? C : 1);
    } else if ((rs == 1 || R == 1) && cs >= (R > 1 ? R : 1)) {
        L->trans = true;
        L->ld = cs > 0 ? cs : (R > 0 ? R : 1);
    } else {
        return false;
    }
    /* batch dims of the output; x's leading dims align to its last ones */
    int onb = o->ndim - 2, xnb = nd - 2;
    int64_t stride = -1, expect = -1;
    for (int d = onb - 1; d >= 0; d--) {
        int xd = d - (onb - xnb);
        int64_t s = xd >= 0 && x->shape[xd] != 1 ? x->strides[xd] : 0;
        if (o->shape[d] == 1) continue;
        if (stride < 0) {
            stride = s;
            expect = s * o->shape[d];
        } else if (s != expect) { /* (all broadcast: stride 0 and expect 0) */
            return false;
        } else {
            expect = s * o->shape[d];
        }
    }
    L->batch_stride = stride < 0 ? 0 : stride;
    return true;
}

int mkb_cuda_gemm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_gemm_params *gp = p->params;
    const mk_array *a = in[0], *b = in[1];
    mk_array *o = out[0];
    const int ct = cuda_type(o->dtype);
    pthread_once(&bl.once, load);
    layout la, lb;
    const int nd = o->ndim;
    const int64_t M = o->shape[nd - 2], N = o->shape[nd - 1], K = a->shape[a->ndim - 1];
    if (bl.why[0] || ct < 0 || gp->has_c || a->dtype != o->dtype || b->dtype != o->dtype || o->size == 0 || K == 0 ||
        M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || !operand_layout(a, o, &la) || !operand_layout(b, o, &lb))
        return p->op->eval(p, in, out); /* the CPU's evaluator: copies down, computes, a later GPU op copies up */
    const int64_t batch = o->size / (M * N);
    if (batch > INT32_MAX) return p->op->eval(p, in, out);
    if (get_handle("matmul") < 0) return -1;
    CUdeviceptr pa, pb, po;
    mk_buffer *ob = mk_buffer_device((size_t)o->size * mk_dtype_size(o->dtype), &mkb_cuda_mem);
    if (!ob) return -1;
    if (o->buf) mk_buffer_decref(o->buf);
    o->buf = ob;
    mk_set_row_contiguous(o);
    if (mkb_cuda_buffer_ptr(a->buf, &pa) < 0 || mkb_cuda_buffer_ptr(b->buf, &pb) < 0 ||
        mkb_cuda_buffer_ptr(ob, &po) < 0)
        return -1;
    const size_t esz = mk_dtype_size(o->dtype);
    pa += (CUdeviceptr)(a->offset * (int64_t)esz);
    pb += (CUdeviceptr)(b->offset * (int64_t)esz);
    /* row-major out = a @ b is column-major out^T = b^T @ a^T */
    const float alpha = gp->alpha, beta = 0.0f;
    cublasStatus_t st = bl.gemm(handle, lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N, la.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                (int)N, (int)M, (int)K, &alpha, (const void *)(uintptr_t)pb, ct, (int)lb.ld,
                                lb.batch_stride, (const void *)(uintptr_t)pa, ct, (int)la.ld, la.batch_stride, &beta,
                                (void *)(uintptr_t)po, ct, (int)N, M * N, (int)batch, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT);
    if (st != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[matmul] cuBLAS failed (status %d) on a (%lld, %lld) x (%lld, %lld) product.",
                     st, (long long)M, (long long)K, (long long)K, (long long)N);
        return -1;
    }
    return mkb_cuda_wait("matmul", NULL);
}

/* segmented_mm (ops_quant.c's SegmentedMM: a and b row-contiguous, the
 * segments uint32 pairs, clamped to K): one product per segment, of the
 * slices a[:, k0:k1] and b[k0:k1, :] as matmul takes them (so a segment's
 * result is that of matmul on the slices: MLX's test compares the two), an
 * empty segment zeros. The segments are read on the host (a copy down). */
int mkb_cuda_segmm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *a = in[0], *b = in[1], *sg = in[2];
    mk_array *o = out[0];
    const int ct = cuda_type(o->dtype);
    pthread_once(&bl.once, load);
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1], nseg = sg->size / 2;
    if (bl.why[0] || ct < 0 || a->dtype != o->dtype || b->dtype != o->dtype || o->size == 0 ||
        !(a->flags & MK_ROW_CONTIG) || !(b->flags & MK_ROW_CONTIG) || !(sg->flags & MK_ROW_CONTIG) ||
        sg->dtype != MK_UINT32 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return p->op->eval(p, in, out);
    const uint32_t *seg = mk_data(sg);
    if (mk_take_device_error() || get_handle("segmented_mm") < 0) return -1;
    CUdeviceptr pa, pb, po;
    if (mkb_cuda_ptr(a, &pa) < 0 || mkb_cuda_ptr(b, &pb) < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0)
        return -1;
    const size_t esz = mk_dtype_size(o->dtype), mn = (size_t)(M * N) * esz;
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t i = 0; i < nseg; i++) {
        int64_t k0 = seg[2 * i] < K ? seg[2 * i] : K, k1 = seg[2 * i + 1] < K ? seg[2 * i + 1] : K;
        CUdeviceptr oi = po + (CUdeviceptr)(i * mn);
        if (k1 <= k0) {
            if (mkb_cuda_check(mkb_cu.cuMemsetD8_v2(oi, 0, mn), "segmented_mm") < 0) return -1;
            continue;
        }
        /* row-major out = a_s @ b_s is column-major out^T = b_s^T @ a_s^T */
        cublasStatus_t st = bl.gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)(k1 - k0), &alpha,
                                    (const void *)(uintptr_t)(pb + (CUdeviceptr)(k0 * N) * esz), ct, (int)N, 0,
                                    (const void *)(uintptr_t)(pa + (CUdeviceptr)k0 * esz), ct, (int)K, 0, &beta,
                                    (void *)(uintptr_t)oi, ct, (int)N, M * N, 1, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
        if (st != 0) {
            mk_error_set(MK_ERR_RUNTIME, "[segmented_mm] cuBLAS failed (status %d) on segment %lld.", st, (long long)i);
            return -1;
        }
    }
    return mkb_cuda_wait("segmented_mm", NULL);
}
