/* Fibers: small stackful coroutines with an assembly context switch
 * (x86-64 and aarch64), used to run the threads of a threadgroup
 * cooperatively. Stacks come from mmap with a guard page below each, and a
 * fault inside kernel code (a stack overflow, a wild pointer) is turned into
 * an error on the worker instead of killing the process.
 *
 * The switch saves only the callee-saved registers (not the floating-point
 * control words, which every fiber of a thread shares: see fiber.c): a few
 * nanoseconds, where ucontext's swapcontext makes a signal-mask system call
 * every time. */
#ifndef MKK_FIBER_H
#define MKK_FIBER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ThreadSanitizer builds (make tsan) tell TSan about every fiber switch
 * with its fiber API, so that it keeps one shadow stack per fiber; without
 * the sanitizer these helpers compile to nothing. */
#if defined(__SANITIZE_THREAD__)
#define MK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MK_TSAN 1
#endif
#endif
#ifdef MK_TSAN
#include <sanitizer/tsan_interface.h>
#endif

typedef struct mk_fiber mk_fiber;
typedef void (*mk_fiber_fn)(void *arg);

/* Switches from the running context (its stack pointer is stored in *from)
 * to the context whose saved stack pointer is `to`. */
void mk_fiber_switch(void **from, void *to);

struct mk_fiber {
    void *sp;         /* saved stack pointer while suspended */
    char *stack_lo;   /* lowest usable address (just above the guard page) */
    size_t stack_size;
    char *top;        /* where the stack starts: below the end by a per-stack
                       * offset, so that the stacks' hot top frames do not all
                       * fall into the same cache sets */
    mk_fiber_fn fn;
    void *arg;
    void **return_to; /* where the scheduler's stack pointer is kept */
    int done;
#ifdef MK_TSAN
    void *tsan;        /* TSan's fiber for this stack */
    void *tsan_return; /* TSan's fiber of the context that prepared it */
#endif
};

/* Call just before switching into f, and just before f switches back to the
 * context that prepared it. */
static inline void mk_tsan_enter(mk_fiber *f) {
#ifdef MK_TSAN
    __tsan_switch_to_fiber(f->tsan, 0);
#else
    (void)f;
#endif
}
static inline void mk_tsan_leave(mk_fiber *f) {
#ifdef MK_TSAN
    __tsan_switch_to_fiber(f->tsan_return, 0);
#else
    (void)f;
#endif
}

/* Prepares f to run fn(arg) on its stack when first switched to; when fn
 * returns, the fiber marks itself done and switches to *return_to. */
void mk_fiber_prepare(mk_fiber *f, mk_fiber_fn fn, void *arg, void **return_to);

/* A stack of `size` usable bytes with a guard page below it. */
int mk_fiber_stack_alloc(mk_fiber *f, size_t size);
void mk_fiber_stack_free(mk_fiber *f);

/* --- faults in kernel code --------------------------------------------- */

/* Describes the fault that stopped kernel code on this thread. */
typedef struct {
    int happened;
    int stack_overflow; /* the address was in a fiber's guard page */
    int sig;            /* SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP; 0 when cancelled */
    int code;           /* the signal's si_code */
    int write;          /* 1: a store, 0: a load, -1: unknown (memory faults) */
    int cancelled;      /* stopped by mk_fault_kick (Ctrl-C or the watchdog) */
    uintptr_t addr;     /* the faulting address (memory faults) */
    uintptr_t pc;       /* the faulting instruction */
} mk_fault;

/* Runs fn(arg) on a fiber of this thread (so that a fault inside it can be
 * caught). Returns 0, or -1 with *fault filled if the code faulted. The
 * fiber's stack is `stack_size` bytes (reused between calls).
 *
 * While fn runs, SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGTRAP raised on this
 * thread end it (an error instead of the process's death), except integer
 * division faults, which are completed with GPU-like values (see
 * mk_fault_division) and resume. `cancel`, when not NULL, is a flag that
 * mk_fault_kick checks: a kicked thread whose flag is set leaves fn as if it
 * had faulted (fault->cancelled). */
int mk_fault_guarded_call(mk_fiber_fn fn, void *arg, mk_fault *fault);
int mk_fault_guarded_call_cancellable(mk_fiber_fn fn, void *arg, mk_fault *fault, const _Atomic int *cancel);

/* The cancel flag of the guarded call running on this thread (NULL outside
 * one): cooperative code checks it between threadgroups and at barriers. */
int mk_fault_cancel_requested(void);
/* The flag mk_fault_cancel_requested reads (NULL outside a guarded call): a
 * loop checking it often reads it once, not the thread-local state each time. */
const _Atomic int *mk_fault_cancel_flag(void);

/* Sends the kick signal to `thread`, which, if it is inside a guarded call
 * whose cancel flag is set, leaves it at once wherever it is. */
void mk_fault_kick(pthread_t thread);

/* Registers the fibers whose guard pages belong to the current guarded call
 * (for telling stack overflows from other faults). */
void mk_fault_watch_stacks(mk_fiber *fibers, int n);

#endif
