/* What the two LLVM passes (cbs_ir.c, check_ir.c) share: reading a kernel's
 * bitcode and making the target machine for this host. Only the pass
 * program includes this (it needs LLVM 15's headers); ir_load.c has the code. */
#ifndef MKK_IR_LOAD_H
#define MKK_IR_LOAD_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <stddef.h>

typedef struct {
    LLVMModuleRef m;
    LLVMTargetMachineRef tm;
    char *triple;         /* malloc'ed */
    char *cpu, *features; /* LLVMDisposeMessage */
} mkk_ir_module;

/* Reads bitcode into a new module of cx, and a target machine for this host
 * (the passes need its cost model: without it nothing is vectorised; the
 * object is emitted for it). Returns 0, or -1 with the reason in `why`;
 * whatever was made is in *out either way, for the caller to dispose of. */
int mkk_ir_load(LLVMContextRef cx, const char *bc_path, mkk_ir_module *out, char *why, size_t whyn);

/* Verifies the transformed module, runs LLVM's O2 on it (the loop and SLP
 * vectorisers on or off by `vectorize`, LLVM's defaults when it is -1) and writes the object file. With
 * MKPY_CBS_DUMP set (a folder), the IR goes to <dump>/<before> and, if
 * `after` is not NULL, <dump>/<after>. Returns 0, or -1 with the reason in `why`. */
int mkk_ir_finish(LLVMModuleRef m, LLVMTargetMachineRef tm, const char *obj_path, int vectorize, const char *before,
                  const char *after, char *why, size_t whyn);

/* Frees what mkk_ir_load made (the module too; its context stays) and zeroes *mod. */
void mkk_ir_dispose(mkk_ir_module *mod);

/* Both passes keep the caller's reason buffer as `why`/`whyn` in their state
 * `st`: writes the reason there and evaluates to -1. */
#define mkk_ir_fail(st, ...) mkk_ir_failf((st)->why, (st)->whyn, __VA_ARGS__)
int mkk_ir_failf(char *why, size_t whyn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The fiber engine's release order in f (cbs_ir.c): a call of
 * mkpy_sync_order(rank, wait) before every runtime point and at the latch of
 * loops holding SIMD-group functions. Returns 1, 0 when f has no point or
 * reaches one through a call it still makes (nothing changed), or -1 with
 * the reason in `why`. */
int mkk_ir_order_sites(LLVMContextRef cx, LLVMModuleRef m, LLVMValueRef f, char *why, size_t whyn);

/* An LLVM value's name, "" when it has none. */
static inline const char *mkk_ir_name(LLVMValueRef v) {
    size_t n;
    const char *s = LLVMGetValueName2(v, &n);
    return s ? s : "";
}

#endif
