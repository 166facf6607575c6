/* What the two LLVM passes (cbs_ir.c, check_ir.c) share (ir_load.h): reading a
 * kernel's bitcode, the target machine for this host, and LLVM's O2 plus the
 * object file at the end. Part of the pass program, not of the extension. */
#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Comdat.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_load.h"

/* clang 16 and later reach a thread_local global (a threadgroup variable) through a call of
 * llvm.threadlocal.address; clang 15 names the global itself. Each call is replaced by its
 * operand, so that both passes see one form (and the same variables, names and counts in the
 * checker's reports) whichever clang made the bitcode. */
static void strip_threadlocal_address(LLVMModuleRef m) {
    for (LLVMValueRef f = LLVMGetFirstFunction(m); f;) {
        LLVMValueRef next = LLVMGetNextFunction(f);
        size_t len = 0;
        const char *name = LLVMGetValueName2(f, &len);
        if (len >= 24 && strncmp(name, "llvm.threadlocal.address", 24) == 0) {
            LLVMUseRef u;
            while ((u = LLVMGetFirstUse(f))) {
                LLVMValueRef call = LLVMGetUser(u);
                if (!LLVMIsACallInst(call)) break;
                LLVMReplaceAllUsesWith(call, LLVMGetOperand(call, 0));
                LLVMInstructionEraseFromParent(call);
            }
            if (!LLVMGetFirstUse(f)) LLVMDeleteFunction(f);
        }
        f = next;
    }
}

int mkk_ir_load(LLVMContextRef cx, const char *bc_path, mkk_ir_module *out, char *why, size_t whyn) {
    char *err = NULL;
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    LLVMMemoryBufferRef mb = NULL;
    if (LLVMCreateMemoryBufferWithContentsOfFile(bc_path, &mb, &err)) {
        snprintf(why, whyn, "cannot read %s: %s", bc_path, err ? err : "?");
        goto fail;
    }
    if (LLVMParseBitcodeInContext2(cx, mb, &out->m)) {
        LLVMDisposeMemoryBuffer(mb);
        snprintf(why, whyn, "cannot parse the kernel's bitcode");
        goto fail;
    }
    LLVMDisposeMemoryBuffer(mb);
    strip_threadlocal_address(out->m);
    out->triple = strdup(LLVMGetTarget(out->m));
    LLVMTargetRef target;
    if (!out->triple || LLVMGetTargetFromTriple(out->triple, &target, &err)) {
        snprintf(why, whyn, "no target for %s: %s", out->triple ? out->triple : "?", err ? err : "out of memory");
        goto fail;
    }
    out->cpu = LLVMGetHostCPUName();
    out->features = LLVMGetHostCPUFeatures();
    if (strncmp(out->triple, "x86_64", 6) == 0) {
        /* as the JIT's clang flags (jit.c TARGET_FLAGS): a division keeps its C type's width, so
         * that the fault handler completes a division by zero with that type's values; the
         * pass's own functions take the target machine's features */
        static const char no_narrow_div[] = ",-idivq-to-divl,-idivl-to-divb";
        size_t n = strlen(out->features) + sizeof no_narrow_div;
        char *f = malloc(n);
        if (f) {
            snprintf(f, n, "%s%s", out->features, no_narrow_div);
            LLVMDisposeMessage(out->features);
            out->features = LLVMCreateMessage(f);
            free(f);
        }
    }
    out->tm = LLVMCreateTargetMachine(target, out->triple, out->cpu, out->features, LLVMCodeGenLevelDefault,
                                      LLVMRelocPIC, LLVMCodeModelDefault);
    if (!out->tm) {
        snprintf(why, whyn, "cannot create a target machine");
        goto fail;
    }
    return 0;
fail:
    if (err) LLVMDisposeMessage(err);
    return -1;
}

static void dump_ir(LLVMModuleRef m, const char *name) {
    const char *dump = getenv("MKPY_CBS_DUMP"); /* a folder */
    if (!dump || !name) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dump, name);
    LLVMPrintModuleToFile(m, path, NULL);
}

/* Every defined function but the entry points (mkpy_kernel_*, which mkpy
 * looks up) becomes internal, so that O2 drops what they do not call before
 * it optimises and generates code for it: the kernel's own function (an
 * explicit instantiation, weak_odr) once inlined everywhere, the runtime's
 * weak stubs (~11% of the lockstep pass's time). The object's symbols are
 * its entry points only, as a plain kernel's. */
static void internalize(LLVMModuleRef m) {
    for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
        if (LLVMIsDeclaration(f) || strncmp(mkk_ir_name(f), "mkpy_kernel_", 12) == 0) continue;
        LLVMSetLinkage(f, LLVMInternalLinkage);
        LLVMSetVisibility(f, LLVMDefaultVisibility);
        LLVMSetComdat(f, NULL);
    }
}

int mkk_ir_finish(LLVMModuleRef m, LLVMTargetMachineRef tm, const char *obj_path, int vectorize, const char *before,
                  const char *after, char *why, size_t whyn) {
    char *err = NULL;
    internalize(m);
    dump_ir(m, before);
    if (LLVMVerifyModule(m, LLVMReturnStatusAction, &err)) {
        snprintf(why, whyn, "internal error, invalid IR: %.300s", err ? err : "");
        goto fail;
    }
    if (err) {
        LLVMDisposeMessage(err);
        err = NULL;
    }
    LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
    if (vectorize >= 0) {
        LLVMPassBuilderOptionsSetLoopVectorization(o, vectorize);
        LLVMPassBuilderOptionsSetSLPVectorization(o, vectorize);
    }
    LLVMErrorRef e = LLVMRunPasses(m, "default<O2>", tm, o);
    LLVMDisposePassBuilderOptions(o);
    if (e) {
        char *msg = LLVMGetErrorMessage(e);
        snprintf(why, whyn, "optimisation failed: %s", msg);
        LLVMDisposeErrorMessage(msg);
        return -1;
    }
    dump_ir(m, after);
    if (LLVMTargetMachineEmitToFile(tm, m, (char *)obj_path, LLVMObjectFile, &err)) {
        snprintf(why, whyn, "cannot emit %s: %s", obj_path, err ? err : "?");
        goto fail;
    }
    return 0;
fail:
    if (err) LLVMDisposeMessage(err);
    return -1;
}

void mkk_ir_dispose(mkk_ir_module *mod) {
    if (mod->tm) LLVMDisposeTargetMachine(mod->tm);
    free(mod->triple);
    if (mod->cpu) LLVMDisposeMessage(mod->cpu);
    if (mod->features) LLVMDisposeMessage(mod->features);
    if (mod->m) LLVMDisposeModule(mod->m);
    *mod = (mkk_ir_module){0};
}

int mkk_ir_failf(char *why, size_t whyn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whyn, fmt, ap);
    va_end(ap);
    return -1;
}
