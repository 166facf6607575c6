#include "backend/cpu/fiber.h"

#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

/* ------------------------------------------------------ context switch */

/* Only the callee-saved integer (and, on aarch64, d8-d15) registers are
 * switched. The floating-point control state (MXCSR and the x87 control word,
 * FPCR) is deliberately not: every fiber of a worker runs on one OS thread
 * under the same control state, and kernel code never changes it (Metal has no
 * way to, and a -shared object built with -ffast-math does not link
 * crtfastmath). Loading those registers costs more than the rest of a switch. */
#if defined(__x86_64__)
/* frame on a suspended stack: r15 r14 r13 r12 rbx rbp retaddr */
__asm__(".text\n"
        ".globl mk_fiber_switch\n"
        ".type mk_fiber_switch,@function\n"
        "mk_fiber_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size mk_fiber_switch, .-mk_fiber_switch\n"
        ".globl mk_fiber_trampoline\n"
        ".type mk_fiber_trampoline,@function\n"
        "mk_fiber_trampoline:\n"
        "    movq %r12, %rdi\n"
        "    call mk_fiber_main\n"
        "    ud2\n"
        ".size mk_fiber_trampoline, .-mk_fiber_trampoline\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");
#elif defined(__aarch64__)
/* frame: x19..x28, x29, x30, d8..d15 (160 bytes) */
__asm__(".text\n"
        ".globl mk_fiber_switch\n"
        ".type mk_fiber_switch,%function\n"
        "mk_fiber_switch:\n"
        "    sub sp, sp, #160\n"
        "    stp x19, x20, [sp, #0]\n"
        "    stp x21, x22, [sp, #16]\n"
        "    stp x23, x24, [sp, #32]\n"
        "    stp x25, x26, [sp, #48]\n"
        "    stp x27, x28, [sp, #64]\n"
        "    stp x29, x30, [sp, #80]\n"
        "    stp d8, d9, [sp, #96]\n"
        "    stp d10, d11, [sp, #112]\n"
        "    stp d12, d13, [sp, #128]\n"
        "    stp d14, d15, [sp, #144]\n"
        "    mov x9, sp\n"
        "    str x9, [x0]\n"
        "    mov sp, x1\n"
        "    ldp x19, x20, [sp, #0]\n"
        "    ldp x21, x22, [sp, #16]\n"
        "    ldp x23, x24, [sp, #32]\n"
        "    ldp x25, x26, [sp, #48]\n"
        "    ldp x27, x28, [sp, #64]\n"
        "    ldp x29, x30, [sp, #80]\n"
        "    ldp d8, d9, [sp, #96]\n"
        "    ldp d10, d11, [sp, #112]\n"
        "    ldp d12, d13, [sp, #128]\n"
        "    ldp d14, d15, [sp, #144]\n"
        "    add sp, sp, #160\n"
        "    ret\n"
        ".size mk_fiber_switch, .-mk_fiber_switch\n"
        ".globl mk_fiber_trampoline\n"
        ".type mk_fiber_trampoline,%function\n"
        "mk_fiber_trampoline:\n"
        "    mov x0, x19\n"
        "    bl mk_fiber_main\n"
        "    brk #0\n"
        ".size mk_fiber_trampoline, .-mk_fiber_trampoline\n"
        ".section .note.GNU-stack,\"\",%progbits\n"
        ".text\n");
#else
#error "mkpy's fibers need an x86-64 or aarch64 context switch"
#endif

void mk_fiber_trampoline(void);
void mk_fiber_main(mk_fiber *f);

void mk_fiber_main(mk_fiber *f) {
    f->fn(f->arg);
    f->done = 1;
    void *junk;
    mk_tsan_leave(f);
    mk_fiber_switch(&junk, *f->return_to);
}

static void mk_tsan_fiber_destroy(mk_fiber *f) {
#ifdef MK_TSAN
    if (f->tsan) __tsan_destroy_fiber(f->tsan);
    f->tsan = NULL;
#else
    (void)f;
#endif
}

void mk_fiber_prepare(mk_fiber *f, mk_fiber_fn fn, void *arg, void **return_to) {
    uintptr_t top = ((uintptr_t)(f->top ? f->top : f->stack_lo + f->stack_size)) & ~(uintptr_t)15;
    f->fn = fn;
    f->arg = arg;
    f->return_to = return_to;
    f->done = 0;
#ifdef MK_TSAN
    if (!f->tsan) f->tsan = __tsan_create_fiber(0);
    f->tsan_return = __tsan_get_current_fiber();
#endif
#if defined(__x86_64__)
    /* after the 6 pops and the ret, rsp = top - 16: 16-byte aligned before
     * the trampoline's call, as the ABI wants */
    uint64_t *sp = (uint64_t *)(top - 72);
    sp[0] = 0;                                /* r15 */
    sp[1] = 0;                                /* r14 */
    sp[2] = 0;                                /* r13 */
    sp[3] = (uint64_t)(uintptr_t)f;           /* r12: the fiber */
    sp[4] = 0;                                /* rbx */
    sp[5] = 0;                                /* rbp */
    sp[6] = (uint64_t)(uintptr_t)mk_fiber_trampoline;
    f->sp = sp;
#else
    uint64_t *sp = (uint64_t *)(top - 160);
    memset(sp, 0, 160);
    sp[0] = (uint64_t)(uintptr_t)f;                    /* x19: the fiber */
    sp[11] = (uint64_t)(uintptr_t)mk_fiber_trampoline; /* x30 */
    f->sp = sp;
#endif
}

static size_t page_size(void) {
    static _Atomic size_t ps; /* the same value from any thread */
    size_t v = atomic_load_explicit(&ps, memory_order_relaxed);
    if (!v) atomic_store_explicit(&ps, v = (size_t)sysconf(_SC_PAGESIZE), memory_order_relaxed);
    return v;
}

#define COLOUR_ROOM (16u << 10) /* the most a stack's start is moved down by */

int mk_fiber_stack_alloc(mk_fiber *f, size_t size) {
    size_t ps = page_size();
    size_t usable = size;
    size = (size + COLOUR_ROOM + ps - 1) / ps * ps;
    char *base = mmap(NULL, size + ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return -1;
    if (mprotect(base, ps, PROT_NONE) != 0) {
        munmap(base, size + ps);
        return -1;
    }
    f->stack_lo = base + ps;
    f->stack_size = size;
    /* cache colouring: successive stacks start 64 + 4096 * k bytes apart in
     * their last pages' offsets (stacks are 132 KiB apart, which would put
     * every top frame in the same L1 set and a handful of L2 sets) */
    static _Atomic unsigned counter;
    unsigned c = counter++;
    size_t colour = (size_t)(c % 64u) * 64u + (size_t)(c / 64u % 4u) * 4096u;
    _Static_assert(63 * 64 + 3 * 4096 <= COLOUR_ROOM, "colours fit the room");
    f->top = f->stack_lo + usable + colour; /* at least `usable` bytes below it */
    return 0;
}

void mk_fiber_stack_free(mk_fiber *f) {
    mk_tsan_fiber_destroy(f);
    if (f->stack_lo) munmap(f->stack_lo - page_size(), f->stack_size + page_size());
    f->stack_lo = NULL;
}

/* ------------------------------------------------------------- faults */

#define ROOT_STACK (8u << 20)      /* the guarded call's own stack */
#define ESCAPE_STACK (64u << 10)   /* where a faulting context resumes */
#define ALT_STACK (64u << 10)      /* where the signal handler runs */

typedef struct {
    bool ready;
    volatile bool active;
    mk_fiber root;
    void *caller_sp;
    mk_fault fault;
    mk_fiber *watched;
    int nwatched;
    char *escape_stack;
    void *alt_stack;
    mk_fiber_fn fn;
    void *arg;
    const _Atomic int *volatile cancel;
} guard_state;

static _Thread_local guard_state guard;
/* the signals kernel code may raise, and the handlers they had before */
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
#define NFATAL ((int)(sizeof fatal_signals / sizeof *fatal_signals))
static struct sigaction old_actions[NFATAL];
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
/* libc's code: a kick that lands there (malloc, stdio, a system call) waits
 * for the next one, so no lock of libc's is ever abandoned */
static uintptr_t libc_lo, libc_hi;

static int kick_signal(void) { return SIGRTMIN + 3; }

void mk_fault_escape(void);
void mk_fault_escape(void) {
    void *junk;
    guard.active = false;
    /* from whichever fiber faulted back to the guarded call's caller */
    mk_tsan_leave(&guard.root);
    mk_fiber_switch(&junk, guard.caller_sp);
    abort(); /* not reached */
}

static void chain(int sig, siginfo_t *si, void *uc) {
    struct sigaction *old = NULL;
    for (int i = 0; i < NFATAL; i++)
        if (fatal_signals[i] == sig) old = &old_actions[i];
    if (old && (old->sa_flags & SA_SIGINFO)) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old && old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* default action: restore it; returning re-executes the faulting
     * instruction (a trap instruction has already executed: raise it again) */
    signal(sig, SIG_DFL);
    if (sig == SIGTRAP || (sig == SIGILL && si->si_code <= 0)) raise(sig);
}

#if defined(__x86_64__)
static greg_t *gpr(ucontext_t *uc, unsigned r) {
    static const int map[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                                REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
    return &uc->uc_mcontext.gregs[map[r & 15]];
}

static int32_t read32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Completes a faulting `div`/`idiv` (a divisor of zero, or INT_MIN / -1) with
 * the values docs/kernels.md documents: x / 0 is all ones (-1, or the
 * unsigned maximum), x % 0 is x, INT_MIN / -1 is INT_MAX (Metal's spec:
 * out-of-range quotients are clamped) and INT_MIN % -1 is 0. Moves past the
 * instruction and returns 1, or returns 0 for anything else. */
static int emulate_division(ucontext_t *uc) {
    const unsigned char *q = (const unsigned char *)uc->uc_mcontext.gregs[REG_RIP];
    int opsize = 32;
    unsigned rex = 0;
    for (int n = 0; n < 4; n++, q++) {
        if (*q == 0x66)
            opsize = 16;
        else if (*q == 0x64 || *q == 0x65 || *q == 0x67)
            return 0; /* fs/gs-relative or 32-bit addressing: not from a compiler's division */
        else if (*q != 0xf2 && *q != 0xf3 && *q != 0x2e && *q != 0x36 && *q != 0x3e && *q != 0x26)
            break;
    }
    if ((*q & 0xf0) == 0x40) rex = *q++;
    if (rex & 8) opsize = 64;
    if (*q == 0xf6)
        opsize = 8;
    else if (*q != 0xf7)
        return 0;
    q++;
    unsigned modrm = *q++, mod = modrm >> 6, reg = (modrm >> 3) & 7, rm = modrm & 7;
    if (reg != 6 && reg != 7) return 0;
    int is_signed = reg == 7;
    uint64_t mask = opsize == 64 ? ~0ull : (1ull << opsize) - 1, divisor = 0;
    if (mod == 3) {
        if (opsize == 8 && !rex && rm >= 4)
            divisor = ((uint64_t)*gpr(uc, rm - 4) >> 8) & 0xff; /* ah, ch, dh, bh */
        else
            divisor = (uint64_t)*gpr(uc, rm | ((rex & 1) << 3));
    } else {
        uint64_t ea = 0;
        int rip_relative = 0;
        if (rm == 4) {
            unsigned sib = *q++, scale = sib >> 6, index = ((sib >> 3) & 7) | ((rex & 2) << 2),
                     base = (sib & 7) | ((rex & 1) << 3);
            if (index != 4) ea += (uint64_t)*gpr(uc, index) << scale;
            if ((sib & 7) == 5 && mod == 0) {
                ea += (uint64_t)(int64_t)read32(q);
                q += 4;
            } else {
                ea += (uint64_t)*gpr(uc, base);
            }
        } else if (rm == 5 && mod == 0) {
            rip_relative = 1;
        } else {
            ea += (uint64_t)*gpr(uc, rm | ((rex & 1) << 3));
        }
        if (mod == 1) {
            ea += (uint64_t)(int64_t)(int8_t)*q;
            q += 1;
        } else if (mod == 2 || rip_relative) {
            ea += (uint64_t)(int64_t)read32(q);
            q += 4;
        }
        if (rip_relative) ea += (uint64_t)(uintptr_t)q; /* no immediate follows */
        memcpy(&divisor, (const void *)(uintptr_t)ea, (size_t)opsize / 8); /* little-endian */
    }
    divisor &= mask;
    greg_t *rax = gpr(uc, 0), *rdx = gpr(uc, 2);
    uint64_t lo, hi;
    if (opsize == 8) {
        lo = (uint64_t)*rax & 0xff;
        hi = ((uint64_t)*rax >> 8) & 0xff;
    } else {
        lo = (uint64_t)*rax & mask;
        hi = (uint64_t)*rdx & mask;
    }
    uint64_t sign = 1ull << (opsize - 1);
    /* the dividend must be the extension of its low half, as compilers make it */
    if (hi != (is_signed && (lo & sign) ? mask : 0)) return 0;
    uint64_t quot, rem;
    if (divisor == 0) {
        quot = mask;
        rem = lo;
    } else if (is_signed && divisor == mask && lo == sign) {
        quot = sign - 1;
        rem = 0;
    } else {
        return 0;
    }
    if (opsize == 8) {
        *rax = (greg_t)(((uint64_t)*rax & ~0xffffull) | (rem << 8) | quot);
    } else if (opsize == 16) {
        *rax = (greg_t)(((uint64_t)*rax & ~0xffffull) | quot);
        *rdx = (greg_t)(((uint64_t)*rdx & ~0xffffull) | rem);
    } else {
        *rax = (greg_t)quot; /* 32-bit results zero-extend */
        *rdx = (greg_t)rem;
    }
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)q;
    return 1;
}
#endif

/* Resumes the interrupted context in mk_fault_escape, on a clean stack. */
static void redirect_to_escape(ucontext_t *uc) {
    uintptr_t top = ((uintptr_t)(guard.escape_stack + ESCAPE_STACK)) & ~(uintptr_t)15;
#if defined(__x86_64__)
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(top - 8);
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)mk_fault_escape;
#else
    uc->uc_mcontext.sp = top;
    uc->uc_mcontext.pc = (uint64_t)(uintptr_t)mk_fault_escape;
#endif
}

static uintptr_t context_pc(const ucontext_t *uc) {
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#else
    return (uintptr_t)uc->uc_mcontext.pc;
#endif
}

static void on_fault(int sig, siginfo_t *si, void *ucv) {
    ucontext_t *uc = ucv;
    if (!guard.active) {
        chain(sig, si, ucv);
        return;
    }
#if defined(__x86_64__)
    if (sig == SIGFPE && (si->si_code == FPE_INTDIV || si->si_code == FPE_INTOVF) && emulate_division(uc)) return;
#endif
    uintptr_t addr = (uintptr_t)si->si_addr;
    size_t ps = page_size();
    guard.fault.happened = 1;
    guard.fault.sig = sig;
    guard.fault.code = si->si_code;
    guard.fault.addr = addr;
    guard.fault.pc = context_pc(uc);
    guard.fault.stack_overflow = 0;
    guard.fault.write = -1;
#if defined(__x86_64__)
    if (sig == SIGSEGV && uc->uc_mcontext.gregs[REG_TRAPNO] == 14) /* a page fault: bit 1 says write */
        guard.fault.write = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#endif
    if (sig == SIGSEGV || sig == SIGBUS) {
        for (int i = 0; i < guard.nwatched; i++) {
            uintptr_t lo = (uintptr_t)guard.watched[i].stack_lo;
            if (lo && addr >= lo - ps && addr < lo) guard.fault.stack_overflow = 1;
        }
        uintptr_t root_lo = (uintptr_t)guard.root.stack_lo;
        if (addr >= root_lo - ps && addr < root_lo) guard.fault.stack_overflow = 1;
#if defined(__x86_64__)
        uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#else
        uintptr_t sp = (uintptr_t)uc->uc_mcontext.sp;
#endif
        /* a stack pointer that left every stack, just below one of them, also
         * means an overflow (fiber stacks are adjacent mappings: a stack pointer
         * inside one stack is below the others' lowest addresses) */
        int sp_in_a_stack = 0;
        for (int i = -1; i < guard.nwatched; i++) {
            const mk_fiber *f = i < 0 ? &guard.root : &guard.watched[i];
            uintptr_t lo = (uintptr_t)f->stack_lo;
            if (lo && sp >= lo && sp < lo + f->stack_size) sp_in_a_stack = 1;
        }
        for (int i = -1; i < guard.nwatched && !sp_in_a_stack; i++) {
            const mk_fiber *f = i < 0 ? &guard.root : &guard.watched[i];
            uintptr_t lo = (uintptr_t)f->stack_lo;
            if (lo && sp < lo && lo - sp < (64u << 20)) guard.fault.stack_overflow = 1;
        }
    }
    redirect_to_escape(uc);
}

static void on_kick(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    ucontext_t *uc = ucv;
    const _Atomic int *cancel = guard.cancel;
    if (!guard.active || !cancel || !atomic_load_explicit(cancel, memory_order_relaxed)) return;
    uintptr_t pc = context_pc(uc);
    if (pc >= libc_lo && pc < libc_hi) return; /* the watchdog kicks again */
    memset(&guard.fault, 0, sizeof guard.fault);
    guard.fault.happened = 1;
    guard.fault.cancelled = 1;
    guard.fault.pc = pc;
    redirect_to_escape(uc);
}

static int find_libc(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    uintptr_t probe = (uintptr_t)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (probe >= lo && probe < hi) {
            libc_lo = lo;
            libc_hi = hi;
            return 1;
        }
    }
    return 0;
}

static void install_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NFATAL; i++) sigaction(fatal_signals[i], &sa, &old_actions[i]);
    dl_iterate_phdr(find_libc, (void *)(uintptr_t)&malloc);
    sa.sa_sigaction = on_kick;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigaction(kick_signal(), &sa, NULL);
}

/* A thread's guard (its signal stack, escape stack and root fiber stack) is
 * freed when the thread exits: Python threads come and go, and each would
 * otherwise keep about 8 MiB of address space and two mappings. */
static pthread_key_t guard_key;
static pthread_once_t guard_key_once = PTHREAD_ONCE_INIT;

static void guard_exit(void *unused) {
    (void)unused;
    if (!guard.ready) return;
    /* stop using the signal stack before freeing it, if it is still ours */
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == guard.alt_stack && !(cur.ss_flags & SS_ONSTACK)) {
        stack_t off;
        memset(&off, 0, sizeof off);
        off.ss_flags = SS_DISABLE;
        sigaltstack(&off, NULL);
        free(guard.alt_stack);
    } /* else someone replaced it: leave the memory (never freed under a live signal stack) */
    guard.alt_stack = NULL;
    free(guard.escape_stack);
    guard.escape_stack = NULL;
    mk_fiber_stack_free(&guard.root);
    guard.ready = false;
}

static void guard_key_make(void) { pthread_key_create(&guard_key, guard_exit); }

static int guard_init(void) {
    if (guard.ready) return 0;
    pthread_once(&guard_key_once, guard_key_make);
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = malloc(ALT_STACK);
    ss.ss_size = ALT_STACK;
    guard.escape_stack = malloc(ESCAPE_STACK);
    if (!ss.ss_sp || !guard.escape_stack || sigaltstack(&ss, NULL) != 0 ||
        mk_fiber_stack_alloc(&guard.root, ROOT_STACK) != 0) {
        free(ss.ss_sp);
        free(guard.escape_stack);
        guard.escape_stack = NULL;
        return -1;
    }
    guard.alt_stack = ss.ss_sp;
    pthread_once(&handler_once, install_handler);
    pthread_setspecific(guard_key, &guard); /* any non-NULL value: guard_exit runs at exit */
    guard.ready = true;
    return 0;
}

static void root_main(void *arg) {
    (void)arg;
    guard.fn(guard.arg);
}

int mk_fault_guarded_call_cancellable(mk_fiber_fn fn, void *arg, mk_fault *fault, const _Atomic int *cancel) {
    memset(fault, 0, sizeof *fault);
    if (guard_init() < 0) {
        fn(arg); /* no guard available: run unguarded */
        return 0;
    }
    if (guard.active) { /* nested: already guarded */
        fn(arg);
        return 0;
    }
    guard.fn = fn;
    guard.arg = arg;
    guard.nwatched = 0;
    memset(&guard.fault, 0, sizeof guard.fault);
    mk_fiber_prepare(&guard.root, root_main, NULL, &guard.caller_sp);
    guard.cancel = cancel;
    guard.active = true;
    mk_tsan_enter(&guard.root);
    mk_fiber_switch(&guard.caller_sp, guard.root.sp);
    guard.active = false;
    guard.cancel = NULL;
    guard.nwatched = 0;
    if (guard.fault.happened) {
        *fault = guard.fault;
        return -1;
    }
    return 0;
}

int mk_fault_guarded_call(mk_fiber_fn fn, void *arg, mk_fault *fault) {
    return mk_fault_guarded_call_cancellable(fn, arg, fault, NULL);
}

int mk_fault_cancel_requested(void) {
    const _Atomic int *c = guard.cancel;
    return c && atomic_load_explicit(c, memory_order_relaxed);
}

const _Atomic int *mk_fault_cancel_flag(void) { return guard.cancel; }

void mk_fault_kick(pthread_t thread) {
    pthread_once(&handler_once, install_handler);
    pthread_kill(thread, kick_signal());
}

void mk_fault_watch_stacks(mk_fiber *fibers, int n) {
    guard.watched = fibers;
    guard.nwatched = n;
}
