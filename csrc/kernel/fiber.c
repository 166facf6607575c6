#include "fiber.h"

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
    bool active;
    mk_fiber root;
    void *caller_sp;
    mk_fault fault;
    mk_fiber *watched;
    int nwatched;
    char *escape_stack;
    void *alt_stack;
    mk_fiber_fn fn;
    void *arg;
} guard_state;

static _Thread_local guard_state guard;
static struct sigaction old_segv, old_bus;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;

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
    struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* default action: restore it; returning re-executes the faulting instruction */
    signal(sig, SIG_DFL);
}

static void on_fault(int sig, siginfo_t *si, void *ucv) {
    if (!guard.active) {
        chain(sig, si, ucv);
        return;
    }
    uintptr_t addr = (uintptr_t)si->si_addr;
    size_t ps = page_size();
    guard.fault.happened = 1;
    guard.fault.addr = addr;
    guard.fault.stack_overflow = 0;
    for (int i = 0; i < guard.nwatched; i++) {
        uintptr_t lo = (uintptr_t)guard.watched[i].stack_lo;
        if (lo && addr >= lo - ps && addr < lo) guard.fault.stack_overflow = 1;
    }
    uintptr_t root_lo = (uintptr_t)guard.root.stack_lo;
    if (addr >= root_lo - ps && addr < root_lo) guard.fault.stack_overflow = 1;
    /* resume in mk_fault_escape on a clean stack, as if it had been called */
    ucontext_t *uc = ucv;
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
    uintptr_t top = ((uintptr_t)(guard.escape_stack + ESCAPE_STACK)) & ~(uintptr_t)15;
#if defined(__x86_64__)
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(top - 8);
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)mk_fault_escape;
#else
    uc->uc_mcontext.sp = top;
    uc->uc_mcontext.pc = (uint64_t)(uintptr_t)mk_fault_escape;
#endif
}

static void install_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
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

int mk_fault_guarded_call(mk_fiber_fn fn, void *arg, mk_fault *fault) {
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
    guard.active = true;
    mk_tsan_enter(&guard.root);
    mk_fiber_switch(&guard.caller_sp, guard.root.sp);
    guard.active = false;
    guard.nwatched = 0;
    if (guard.fault.happened) {
        *fault = guard.fault;
        return -1;
    }
    return 0;
}

void mk_fault_watch_stacks(mk_fiber *fibers, int n) {
    guard.watched = fibers;
    guard.nwatched = n;
}
