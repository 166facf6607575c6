/* The MPI backend of the distributed layer (as MLX's mlx/distributed/mpi):
 * Open MPI's libmpi is loaded at run time (dlopen; MKPY_MPI_LIBNAME or
 * MLX_MPI_LIBNAME names another file), so the build needs no MPI and a
 * machine without it runs with the singleton group.
 *
 * Every MPI call mkpy makes is on the communication thread (distributed.c);
 * MPI is started at MPI_THREAD_SERIALIZED so that a program may also call
 * libmpi itself (mpi4py, ctypes) from another thread, never at the same
 * time as an evaluation that communicates. Transfers are the
 * non-blocking calls, polled with MPI_Test until done or until
 * MKPY_DIST_TIMEOUT seconds (default 300) have passed: a rank that raised or
 * died then fails the others with an error instead of a hang. Counts over
 * MKPY_DIST_CHUNK bytes (default 1 GiB, and never over INT_MAX elements) go
 * in several calls. float16 and bfloat16 travel as 2-byte types reduced by
 * MPI user ops in the dtype's own arithmetic (each step rounded, as MLX's
 * simple_sum / simple_max / simple_min), complex64 max and min by a user
 * op ordering on (real, imag) as MLX's complex64_t; bool sums are logical
 * or, its max or and min and. The declarations below are Open MPI's ABI
 * (handles are pointers to its predefined objects), the only MPI mkpy
 * loads, as MLX. */
#include <dlfcn.h>
#include <pthread.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distributed.h"
#include "error.h"
#include "half.h"

typedef void *MPI_Comm, *MPI_Datatype, *MPI_Op, *MPI_Request, *MPI_Errhandler;
typedef long MPI_Aint;
typedef void MPI_User_function(void *in, void *inout, int *len, MPI_Datatype *dt);
#define MPI_SUCCESS 0
#define MPI_THREAD_SERIALIZED 2
#define MPI_IN_PLACE ((void *)1)
#define MPI_STATUS_IGNORE NULL
#define MPI_ANY_TAG (-1)

static struct {
    void *lib;
    int (*get_library_version)(char *, int *);
    int (*init_thread)(int *, char ***, int, int *);
    int (*finalize)(void);
    int (*comm_rank)(MPI_Comm, int *);
    int (*comm_size)(MPI_Comm, int *);
    int (*comm_split)(MPI_Comm, int, int, MPI_Comm *);
    int (*comm_free)(MPI_Comm *);
    int (*comm_set_errhandler)(MPI_Comm, MPI_Errhandler);
    int (*iallreduce)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);
    int (*iallgather)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);
    int (*ireduce_scatter_block)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);
    int (*isend)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
    int (*irecv)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
    int (*test)(MPI_Request *, int *, void *);
    int (*type_contiguous)(int, MPI_Datatype, MPI_Datatype *);
    int (*type_create_resized)(MPI_Datatype, MPI_Aint, MPI_Aint, MPI_Datatype *);
    int (*type_commit)(MPI_Datatype *);
    int (*type_free)(MPI_Datatype *);
    int (*op_create)(MPI_User_function *, int, MPI_Op *);
    int (*error_string)(int, char *, int *);
    MPI_Comm world;
    MPI_Errhandler errors_return;
    MPI_Op sum, max, min, lor, land;
    MPI_Datatype t_bool, t_u8, t_u16, t_u32, t_u64, t_i8, t_i16, t_i32, t_i64, t_f32, t_f64, t_c64;
} mpi;

/* made at init */
static MPI_Datatype t_half; /* 2 bytes: float16 and bfloat16 */
static MPI_Op op_sum_f16, op_sum_bf16, op_max_f16, op_max_bf16, op_min_f16, op_min_bf16, op_max_c64, op_min_c64;

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_state; /* 0 not tried, 1 loaded, -1 missing */
static bool started, finalized;
static double timeout_s = 300;
static int64_t chunk_bytes = (int64_t)1 << 30;
static char broken[512]; /* set by a transfer that timed out or failed: every later one fails */

#define LOAD(field, name)                                                                                            \
    if (!(*(void **)&mpi.field = dlsym(mpi.lib, name))) goto missing
#define LOADOBJ(field, name)                                                                                         \
    if (!(mpi.field = dlsym(mpi.lib, name))) goto missing

static bool load(void) {
    pthread_mutex_lock(&load_lock);
    if (load_state) goto out;
    load_state = -1;
    const char *name = getenv("MKPY_MPI_LIBNAME");
    if (!name || !*name) name = getenv("MLX_MPI_LIBNAME");
    if (!name || !*name) name = "libmpi.so";
    mpi.lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!mpi.lib && strcmp(name, "libmpi.so") == 0) mpi.lib = dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
    if (!mpi.lib) goto out;
    LOAD(get_library_version, "MPI_Get_library_version");
    char version[256 + 1] = {0};
    int len = 0;
    mpi.get_library_version(version, &len);
    if (!strstr(version, "Open MPI")) {
        fprintf(stderr, "[mpi] MPI found but it does not appear to be Open MPI. mkpy requires Open MPI but this is %s\n",
                version);
        goto missing;
    }
    LOAD(init_thread, "MPI_Init_thread");
    LOAD(finalize, "MPI_Finalize");
    LOAD(comm_rank, "MPI_Comm_rank");
    LOAD(comm_size, "MPI_Comm_size");
    LOAD(comm_split, "MPI_Comm_split");
    LOAD(comm_free, "MPI_Comm_free");
    LOAD(comm_set_errhandler, "MPI_Comm_set_errhandler");
    LOAD(iallreduce, "MPI_Iallreduce");
    LOAD(iallgather, "MPI_Iallgather");
    LOAD(ireduce_scatter_block, "MPI_Ireduce_scatter_block");
    LOAD(isend, "MPI_Isend");
    LOAD(irecv, "MPI_Irecv");
    LOAD(test, "MPI_Test");
    LOAD(type_contiguous, "MPI_Type_contiguous");
    LOAD(type_create_resized, "MPI_Type_create_resized");
    LOAD(type_commit, "MPI_Type_commit");
    LOAD(type_free, "MPI_Type_free");
    LOAD(op_create, "MPI_Op_create");
    LOAD(error_string, "MPI_Error_string");
    LOADOBJ(world, "ompi_mpi_comm_world");
    LOADOBJ(errors_return, "ompi_mpi_errors_return");
    LOADOBJ(sum, "ompi_mpi_op_sum");
    LOADOBJ(max, "ompi_mpi_op_max");
    LOADOBJ(min, "ompi_mpi_op_min");
    LOADOBJ(lor, "ompi_mpi_op_lor");
    LOADOBJ(land, "ompi_mpi_op_land");
    LOADOBJ(t_bool, "ompi_mpi_c_bool");
    LOADOBJ(t_u8, "ompi_mpi_uint8_t");
    LOADOBJ(t_u16, "ompi_mpi_uint16_t");
    LOADOBJ(t_u32, "ompi_mpi_uint32_t");
    LOADOBJ(t_u64, "ompi_mpi_uint64_t");
    LOADOBJ(t_i8, "ompi_mpi_int8_t");
    LOADOBJ(t_i16, "ompi_mpi_int16_t");
    LOADOBJ(t_i32, "ompi_mpi_int32_t");
    LOADOBJ(t_i64, "ompi_mpi_int64_t");
    LOADOBJ(t_f32, "ompi_mpi_float");
    LOADOBJ(t_f64, "ompi_mpi_double");
    LOADOBJ(t_c64, "ompi_mpi_c_complex");
    load_state = 1;
    goto out;
missing:
    dlclose(mpi.lib);
    mpi.lib = NULL;
out:;
    bool ok = load_state == 1;
    pthread_mutex_unlock(&load_lock);
    return ok;
}

bool mk_dist_mpi_available(void) { return load(); }

/* ------------------------------------------------------------ user ops */

#define HALF_OP(name, T, to32, from32, expr)                                                                         \
    static void name(void *in_, void *acc_, int *len, MPI_Datatype *dt) {                                            \
        (void)dt;                                                                                                    \
        const T *in = in_;                                                                                           \
        T *acc = acc_;                                                                                               \
        for (int i = 0; i < *len; i++) {                                                                             \
            float a = to32(acc[i]), b = to32(in[i]);                                                                 \
            acc[i] = from32(expr);                                                                                   \
        }                                                                                                            \
    }
/* acc = max(acc, in) as std::max: acc unless acc < in (a NaN in `in` is dropped) */
HALF_OP(sum_f16, mk_f16, mk_f16_to_f32, mk_f32_to_f16, a + b)
HALF_OP(sum_bf16, mk_bf16, mk_bf16_to_f32, mk_f32_to_bf16, a + b)
HALF_OP(max_f16, mk_f16, mk_f16_to_f32, mk_f32_to_f16, a < b ? b : a)
HALF_OP(max_bf16, mk_bf16, mk_bf16_to_f32, mk_f32_to_bf16, a < b ? b : a)
HALF_OP(min_f16, mk_f16, mk_f16_to_f32, mk_f32_to_f16, b < a ? b : a)
HALF_OP(min_bf16, mk_bf16, mk_bf16_to_f32, mk_f32_to_bf16, b < a ? b : a)

/* complex64 ordered as MLX's complex64_t: by real part, then imaginary */
static bool c64_less(const float *a, const float *b) { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]); }

static void max_c64(void *in_, void *acc_, int *len, MPI_Datatype *dt) {
    (void)dt;
    const float *in = in_;
    float *acc = acc_;
    for (int i = 0; i < *len; i++)
        if (c64_less(acc + 2 * i, in + 2 * i)) memcpy(acc + 2 * i, in + 2 * i, 8);
}

static void min_c64(void *in_, void *acc_, int *len, MPI_Datatype *dt) {
    (void)dt;
    const float *in = in_;
    float *acc = acc_;
    for (int i = 0; i < *len; i++)
        if (c64_less(in + 2 * i, acc + 2 * i)) memcpy(acc + 2 * i, in + 2 * i, 8);
}

static MPI_Datatype dtype_of(mk_dtype dt) {
    switch (dt) {
    case MK_BOOL: return mpi.t_bool;
    case MK_UINT8: return mpi.t_u8;
    case MK_UINT16: return mpi.t_u16;
    case MK_UINT32: return mpi.t_u32;
    case MK_UINT64: return mpi.t_u64;
    case MK_INT8: return mpi.t_i8;
    case MK_INT16: return mpi.t_i16;
    case MK_INT32: return mpi.t_i32;
    case MK_INT64: return mpi.t_i64;
    case MK_FLOAT32: return mpi.t_f32;
    case MK_FLOAT64: return mpi.t_f64;
    case MK_COMPLEX64: return mpi.t_c64;
    default: return t_half; /* float16, bfloat16 */
    }
}

static MPI_Op op_of(mk_dist_reduce op, mk_dtype dt) {
    switch (dt) {
    case MK_BOOL: return op == MK_DIST_MIN ? mpi.land : mpi.lor;
    case MK_FLOAT16: return op == MK_DIST_SUM ? op_sum_f16 : op == MK_DIST_MAX ? op_max_f16 : op_min_f16;
    case MK_BFLOAT16: return op == MK_DIST_SUM ? op_sum_bf16 : op == MK_DIST_MAX ? op_max_bf16 : op_min_bf16;
    case MK_COMPLEX64:
        if (op != MK_DIST_SUM) return op == MK_DIST_MAX ? op_max_c64 : op_min_c64;
        return mpi.sum;
    default: return op == MK_DIST_SUM ? mpi.sum : op == MK_DIST_MAX ? mpi.max : mpi.min;
    }
}

/* ----------------------------------------------------------- transfers */

typedef struct {
    MPI_Comm comm;
    int rank, size;
    bool world;
} mpi_group;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int mpi_fail(const char *what, int code) {
    char msg[256] = {0};
    int len = 0;
    if (mpi.error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", code);
    mk_error_set(MK_ERR_RUNTIME, "[mpi] %s failed: %s", what, msg);
    return -1;
}

static int check_usable(void) {
    if (!broken[0]) return 0;
    mk_error_set(MK_ERR_RUNTIME, "%s. The MPI group cannot be used after that.", broken);
    return -1;
}

/* Waits for a started request: polls MPI_Test (which also drives MPI's
 * progress) until it completes, fails, or the timeout passes. */
static int wait_req(const char *what, int rc, MPI_Request *req) {
    if (rc != MPI_SUCCESS) return mpi_fail(what, rc);
    double deadline = now_s() + timeout_s;
    for (unsigned spins = 0;; spins++) {
        int flag = 0;
        rc = mpi.test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(what, rc);
        if (flag) return 0;
        if (spins >= 64) {
            /* not done at once: poll every 20 us, leaving the core to the
             * computation that goes on meanwhile (a rank bound to one core
             * shares it with this thread) */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        if ((spins & 63) == 63) {
            if (now_s() > deadline) {
                snprintf(broken, sizeof broken,
                         "[mpi] %s timed out after %g s (MKPY_DIST_TIMEOUT): another rank raised, died or never "
                         "reached it",
                         what, timeout_s);
                mk_error_set(MK_ERR_RUNTIME, "%s", broken);
                return -1;
            }
        }
    }
}

static int64_t chunk_elems(size_t isz) {
    int64_t c = chunk_bytes / (int64_t)isz;
    if (c < 1) c = 1;
    return c > INT_MAX ? INT_MAX : c;
}

static int mpi_rank(const mk_dist_group *g) { return ((const mpi_group *)g->state)->rank; }
static int mpi_size(const mk_dist_group *g) { return ((const mpi_group *)g->state)->size; }

static int mpi_all_reduce(mk_dist_group *g, mk_dist_reduce op, mk_dtype dt, const void *in, void *out, int64_t n) {
    mpi_group *s = g->state;
    if (check_usable() < 0) return -1;
    size_t isz = mk_dtype_size(dt);
    int64_t c = chunk_elems(isz);
    for (int64_t off = 0; off < n; off += c) {
        int m = (int)(n - off < c ? n - off : c);
        MPI_Request req;
        const void *src = in == out ? MPI_IN_PLACE : (const char *)in + off * isz;
        int rc = mpi.iallreduce(src, (char *)out + off * isz, m, dtype_of(dt), op_of(op, dt), s->comm, &req);
        if (wait_req("all_reduce", rc, &req) < 0) return -1;
    }
    return 0;
}

static int mpi_all_gather(mk_dist_group *g, mk_dtype dt, const void *in, void *out, int64_t n) {
    mpi_group *s = g->state;
    if (check_usable() < 0) return -1;
    size_t isz = mk_dtype_size(dt);
    MPI_Datatype t = dtype_of(dt);
    int64_t c = chunk_elems(isz);
    if (n <= c) {
        MPI_Request req;
        int rc = mpi.iallgather(in, (int)n, t, out, (int)n, t, s->comm, &req);
        return wait_req("all_gather", rc, &req);
    }
    /* chunk k of every rank lands at out + r * n + off: a type of m
     * elements whose extent is a whole rank's block */
    for (int64_t off = 0; off < n; off += c) {
        int m = (int)(n - off < c ? n - off : c);
        MPI_Datatype block, spaced;
        MPI_Request req;
        if (mpi.type_contiguous(m, t, &block) != MPI_SUCCESS) return mpi_fail("all_gather", 1);
        int rc = mpi.type_create_resized(block, 0, (MPI_Aint)(n * (int64_t)isz), &spaced);
        mpi.type_free(&block);
        if (rc != MPI_SUCCESS) return mpi_fail("all_gather", rc);
        mpi.type_commit(&spaced);
        rc = mpi.iallgather((const char *)in + off * isz, m, t, (char *)out + off * isz, 1, spaced, s->comm, &req);
        rc = wait_req("all_gather", rc, &req);
        if (rc == 0 || !broken[0]) mpi.type_free(&spaced); /* a stuck request may still use it */
        if (rc < 0) return -1;
    }
    return 0;
}

static int mpi_sum_scatter(mk_dist_group *g, mk_dtype dt, const void *in, void *out, int64_t n) {
    mpi_group *s = g->state;
    if (check_usable() < 0) return -1;
    size_t isz = mk_dtype_size(dt);
    int64_t c = chunk_elems(isz);
    MPI_Datatype t = dtype_of(dt);
    MPI_Op op = op_of(MK_DIST_SUM, dt);
    if (n <= c) {
        MPI_Request req;
        int rc = mpi.ireduce_scatter_block(in, out, (int)n, t, op, s->comm, &req);
        return wait_req("sum_scatter", rc, &req);
    }
    /* chunk k of every block packed together, then scattered */
    char *pack = malloc((size_t)s->size * (size_t)c * isz);
    if (!pack) {
        mk_nomem();
        return -1;
    }
    for (int64_t off = 0; off < n; off += c) {
        int m = (int)(n - off < c ? n - off : c);
        for (int r = 0; r < s->size; r++)
            memcpy(pack + (size_t)r * m * isz, (const char *)in + ((int64_t)r * n + off) * isz, (size_t)m * isz);
        MPI_Request req;
        int rc = mpi.ireduce_scatter_block(pack, (char *)out + off * isz, m, t, op, s->comm, &req);
        if (wait_req("sum_scatter", rc, &req) < 0) {
            if (!broken[0]) free(pack);
            return -1;
        }
    }
    free(pack);
    return 0;
}

/* send / recv in chunks; an empty array is still one (empty) message */
static int p2p(mk_dist_group *g, mk_dtype dt, void *buf, int64_t n, int peer, bool send) {
    mpi_group *s = g->state;
    if (check_usable() < 0) return -1;
    size_t isz = mk_dtype_size(dt);
    int64_t c = chunk_elems(isz), off = 0;
    do {
        int m = (int)(n - off < c ? n - off : c);
        char *at = (char *)buf + off * isz;
        MPI_Request req;
        int rc = send ? mpi.isend(at, m, dtype_of(dt), peer, 0, s->comm, &req)
                      : mpi.irecv(at, m, dtype_of(dt), peer, MPI_ANY_TAG, s->comm, &req);
        if (wait_req(send ? "send" : "recv", rc, &req) < 0) return -1;
        off += c;
    } while (off < n);
    return 0;
}

static int mpi_send(mk_dist_group *g, mk_dtype dt, const void *in, int64_t n, int dst) {
    return p2p(g, dt, (void *)in, n, dst, true);
}

static int mpi_recv(mk_dist_group *g, mk_dtype dt, void *out, int64_t n, int src) { return p2p(g, dt, out, n, src, false); }

static const mk_dist_backend mpi_backend;

static mk_dist_group *wrap_comm(MPI_Comm comm, bool world) {
    mpi_group *s = malloc(sizeof *s);
    if (!s) return mk_nomem();
    s->comm = comm;
    s->world = world;
    mpi.comm_rank(comm, &s->rank);
    mpi.comm_size(comm, &s->size);
    mpi.comm_set_errhandler(comm, mpi.errors_return);
    mk_dist_group *g = mk_dist_group_new(&mpi_backend, s);
    if (!g) free(s);
    return g;
}

typedef struct {
    mk_dist_group *parent, *result;
    int color, key;
} split_args;

static int split_job(void *arg) {
    split_args *a = arg;
    mpi_group *s = a->parent->state;
    if (check_usable() < 0) return -1;
    /* first meet every rank with the timeout (MPI_Comm_split itself has
     * none): an all-gather of the (color, key) pairs */
    int mine[2] = {a->color, a->key}, *all = malloc(sizeof mine * (size_t)s->size);
    if (!all) {
        mk_nomem();
        return -1;
    }
    MPI_Request req;
    int rc = mpi.iallgather(mine, 2, mpi.t_i32, all, 2, mpi.t_i32, s->comm, &req);
    rc = wait_req("split", rc, &req);
    if (rc < 0) return -1; /* `all` may still be written by the stuck request */
    free(all);
    MPI_Comm comm;
    rc = mpi.comm_split(s->comm, a->color, a->key, &comm);
    if (rc != MPI_SUCCESS) {
        mk_error_set(MK_ERR_RUNTIME, "MPI could not split this group");
        return -1;
    }
    a->result = wrap_comm(comm, false);
    return a->result ? 0 : -1;
}

static mk_dist_group *mpi_split(mk_dist_group *g, int color, int key) {
    split_args a = {g, NULL, color, key < 0 ? mpi_rank(g) : key};
    if (mk_dist_call(split_job, &a) < 0) return NULL;
    return a.result;
}

static int free_job(void *arg) {
    mpi_group *s = arg;
    if (!finalized && !broken[0]) mpi.comm_free(&s->comm);
    free(s);
    return 0;
}

static void mpi_free_state(void *state) {
    mpi_group *s = state;
    if (s->world) { /* the world lives until finalize */
        free(s);
        return;
    }
    if (mk_dist_post(free_job, s) < 0) free(s); /* leaks the communicator, not the process */
}

static const mk_dist_backend mpi_backend = {
    "mpi", mpi_rank, mpi_size, mpi_split, mpi_all_reduce, mpi_all_gather, mpi_sum_scatter, mpi_send, mpi_recv,
    mpi_free_state,
};

/* ----------------------------------------------------------- init / exit */

typedef struct {
    bool strict;
    mk_dist_group *result;
} init_args;

static int init_job(void *arg) {
    init_args *a = arg;
    if (!started) {
        int provided = 0;
        if (mpi.init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            mk_error_set(MK_ERR_RUNTIME, "Cannot initialize MPI");
            return -1;
        }
        started = true;
        mpi.type_contiguous(2, mpi.t_u8, &t_half);
        mpi.type_commit(&t_half);
        static MPI_User_function *const fns[] = {sum_f16, sum_bf16, max_f16, max_bf16,
                                                 min_f16, min_bf16, max_c64, min_c64};
        MPI_Op *ops[] = {&op_sum_f16, &op_sum_bf16, &op_max_f16, &op_max_bf16,
                         &op_min_f16, &op_min_bf16, &op_max_c64, &op_min_c64};
        for (int i = 0; i < 8; i++) mpi.op_create(fns[i], 1, ops[i]);
    }
    int size = 1;
    mpi.comm_size(mpi.world, &size);
    if (size <= 1) {
        if (a->strict) {
            mk_error_set(MK_ERR_RUNTIME,
                         "[mpi] The world has a single process. Launch with mpirun to initialize the mpi backend.");
            return -1;
        }
        return 0;
    }
    a->result = wrap_comm(mpi.world, true);
    return a->result ? 0 : -1;
}

/* Whether this process was started by an MPI launcher: Open MPI's mpirun
 * (or a PMIx / PMI one) sets these. Without one, init does not start MPI
 * at all (a singleton MPI_Init is slow and gives a world of one). */
static bool launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}

static double env_double(const char *name, double dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    double d = strtod(v, &end);
    return end != v && d > 0 && isfinite(d) ? d : dflt;
}

mk_dist_group *mk_dist_mpi_init(bool strict) {
    if (!load()) {
        if (strict) mk_error_set(MK_ERR_RUNTIME, "Cannot initialize MPI");
        return NULL;
    }
    if (!launched()) {
        /* MLX starts MPI and finds a world of one; the answer is the same
         * without starting it */
        if (strict)
            mk_error_set(MK_ERR_RUNTIME,
                         "[mpi] The world has a single process. Launch with mpirun to initialize the mpi backend.");
        return NULL;
    }
    timeout_s = env_double("MKPY_DIST_TIMEOUT", 300);
    chunk_bytes = (int64_t)env_double("MKPY_DIST_CHUNK", (double)((int64_t)1 << 30));
    if (chunk_bytes < 1) chunk_bytes = 1;
    init_args a = {strict, NULL};
    if (mk_dist_call(init_job, &a) < 0) {
        if (strict) return NULL;
        mk_error_clear();
    }
    return a.result;
}

static int finalize_job(void *arg) {
    (void)arg;
    if (started && !finalized) {
        finalized = true;
        mpi.finalize();
    }
    return 0;
}

void mk_dist_mpi_finalize(bool failing) {
    /* after a failed transfer a request may be stuck inside MPI, and
     * MPI_Finalize would wait for it; on an error exit the launcher stops
     * the other ranks when this one ends without it */
    if (!started || finalized || failing || broken[0]) return;
    mk_dist_call(finalize_job, NULL);
}
