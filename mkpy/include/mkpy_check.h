// The checker mode's hooks (MKPY_CHECK; csrc/backend/cpu/check.c is the runtime,
// csrc/backend/cpu/ir/check_ir.c puts the calls in). Included after the other
// runtime headers by checked kernels only. Each hook handles the common case
// itself (a load from an input already seen, a store that keeps its output
// block affine, a barrier) and calls the runtime for everything else.
#ifndef MKPY_CHECK_H
#define MKPY_CHECK_H

#include "mkpy_launch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MKPY_CHK_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define MKPY_CHK_RELAX() __asm__ __volatile__("yield")
#else
#define MKPY_CHK_RELAX() ((void)0)
#endif

extern "C" {
const mkpy_check_api *mkpy_chk_api;
// the sites ("file:line:col"): the pass defines them
extern const char *const mkpy_chk_sites[];
extern const uint32_t mkpy_chk_nsites;

void mkpy_kernel_set_check(const mkpy_check_api *a) { mkpy_chk_api = a; }

static inline bool mkpy_chk_affine_store(const char *a, uint64_t n, uint32_t s, mkpy_check_thread *t) {
    if (!(a >= t->write_lo && a + n <= t->write_hi && n == ((uint64_t)1 << t->write_shift))) return false;
    const uint64_t off = (uint64_t)(a - t->write_lo);
    if (off & (n - 1)) return false;
    const uint64_t e = off >> t->write_shift;
    mkpy_check_block *bk = &t->write_blocks[e / MKPY_CHECK_BLOCK];
    const unsigned k = (unsigned)(e % MKPY_CHECK_BLOCK);
    const uint64_t me = t->group * t->tgmax + t->index + 1;
    if (t->write_locking)
        while (__atomic_exchange_n(&bk->lock, 1u, __ATOMIC_ACQUIRE))
            while (__atomic_load_n(&bk->lock, __ATOMIC_RELAXED)) MKPY_CHK_RELAX();
    bool done = false;
    if (!bk->full && !bk->lost) {
        if (!bk->written) {
            bk->written = (uint64_t)1 << k;
            bk->base = me - k;
            bk->epoch = t->epoch;
            bk->site = s;
            done = true;
        } else if (!(bk->written >> k & 1) && bk->base + k == me && bk->epoch == t->epoch && bk->site == s) {
            bk->written |= (uint64_t)1 << k;
            done = true;
        }
    }
    if (t->write_locking) __atomic_store_n(&bk->lock, 0u, __ATOMIC_RELEASE);
    return done;
}

__attribute__((always_inline)) void *mkpy_chk_access(void *p, uint64_t n, uint32_t f, uint32_t s, const void *tg,
                                                     mkpy_check_thread *t) {
    const char *a = (const char *)p;
    if (t && !tg) {
        if (f == MKPY_CHK_READ &&
            ((a >= t->read_lo[0] && a + n <= t->read_hi[0]) || (a >= t->read_lo[1] && a + n <= t->read_hi[1])))
            return p;
        if (f == MKPY_CHK_WRITE && mkpy_chk_affine_store(a, n, s, t)) return p;
    }
    return mkpy_chk_api->access(p, n, f, s, tg, t);
}
void mkpy_chk_tg(const void *a, uint64_t n, uint64_t e, uint32_t name, mkpy_check_thread *t) {
    mkpy_chk_api->tg_var(a, n, e, name, t);
}
__attribute__((always_inline)) void mkpy_chk_barrier(mkpy_check_thread *t) {
    if (t)
        t->epoch++;
    else
        mkpy_chk_api->barrier(t);
}
__attribute__((always_inline)) void mkpy_chk_div(uint32_t bad, uint32_t s, mkpy_check_thread *t) {
    if (bad) mkpy_chk_api->div(bad, s, t);
}
}

#endif
