/* The checker mode's compiler pass (mkpy-cbs-pass --check; runtime in
 * csrc/backend/cpu/check.c), on LLVM IR through LLVM's C API.
 *
 * Input: the bitcode of one kernel's C++ built for the checker (jit.c adds
 * the hooks mkpy_chk_access, mkpy_chk_tg, mkpy_chk_barrier and mkpy_chk_div,
 * which call through struct mkpy_check_api, the instrumented function
 * mkpy_kernel_check_body(args, attrs, thread) and the loops that call it).
 *
 * The steps:
 *   1. everything the kernel calls is inlined into mkpy_kernel_check_body
 *      (the runtime points and the hooks stay calls), and SROA turns the
 *      locals into values, so most pointers lead back to what they point into;
 *   2. every load, store, atomic and memcpy/memmove/memset of kernel code
 *      whose pointer does not come from a local variable or the launch data
 *      gets a call `p' = mkpy_chk_access(p, bytes, flags, site, tg, thread)`,
 *      and the access then uses p' (the runtime gives a scratch block for an
 *      out-of-bounds access, so it never lands anywhere). tg is the
 *      threadgroup variable (a thread_local global, see translate.c) the
 *      pointer is derived from, when the IR shows it; thread is the body's
 *      third parameter (NULL in any other function: the runtime finds it);
 *   3. after each threadgroup barrier a call of mkpy_chk_barrier, after each
 *      threadgroup variable's registration a call of mkpy_chk_tg (address,
 *      bytes, element bytes, name);
 *   4. before each integer division or remainder whose divisor is not a
 *      constant that cannot fault, mkpy_chk_div(bad, site, thread) with
 *      bad = 1 for a zero divisor and 2 for INT_MIN / -1;
 *   5. the sites ("file:line:col" strings, and threadgroup variables' names)
 *      become a table, mkpy_chk_sites[mkpy_chk_nsites], that the hooks index;
 *   6. O2 as usual, and an object file for this machine.
 * After step 1 the body's barriers and SIMD-group functions get the fiber
 * engine's release order (mkk_ir_order_sites in cbs_ir.c), as the fiber
 * engine's own objects do. 
 * The site is the user's own line: the innermost location of the inlining
 * chain that lies in `<kernel NAME source>` or `<kernel NAME header>` (the
 * #line names jit.c gives), so an access inside a runtime header function
 * (simdgroup_load, say) is reported at the user's call. */
#include <ctype.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../../mkpy/include/mkpy_launch.h"
#include "cbs_ir.h"
#include "ir_load.h"

typedef struct {
    LLVMContextRef cx;
    LLVMModuleRef m;
    LLVMBuilderRef b;
    LLVMTargetDataRef td;
    LLVMTypeRef i1, i32, i64, ptr, voidt;
    LLVMValueRef fn_access, fn_tg, fn_barrier, fn_div;
    LLVMTypeRef ty_access, ty_tg, ty_barrier, ty_div;
    LLVMValueRef sync_barrier, sync_tg_alloc;
    LLVMValueRef root, root_thread; /* mkpy_kernel_check_body and its thread parameter */
    /* site strings, an index each */
    int nsites, site_cap;
    char **site_text;
    char *why;
    size_t whyn;
} chk;

#define ROOT "mkpy_kernel_check_body"

static int skipped_fn(const char *n) {
    return strncmp(n, "mkpy_sync_", 10) == 0 || strncmp(n, "mkpy_chk_", 9) == 0 ||
           (strncmp(n, "mkpy_kernel_", 12) == 0 && strcmp(n, ROOT) != 0) || strncmp(n, "llvm.", 5) == 0;
}

/* The index of a site's string in the table (step 5); 0 is "?". */
static LLVMValueRef site_index(chk *c, const char *text) {
    for (int i = 0; i < c->nsites; i++)
        if (strcmp(c->site_text[i], text) == 0) return LLVMConstInt(c->i32, (unsigned)i, 0);
    if (c->nsites == c->site_cap) {
        int cap = c->site_cap ? 2 * c->site_cap : 64;
        char **t = realloc(c->site_text, cap * sizeof *t);
        if (!t) return LLVMConstInt(c->i32, 0, 0);
        c->site_text = t;
        c->site_cap = cap;
    }
    char *dup = strdup(text);
    if (!dup) return LLVMConstInt(c->i32, 0, 0);
    c->site_text[c->nsites] = dup;
    return LLVMConstInt(c->i32, (unsigned)c->nsites++, 0);
}

/* Step 5: mkpy_chk_sites (declared `extern const char *const []` by the
 * kernel's C++) and mkpy_chk_nsites get their definitions. */
static int define_sites(chk *c) {
    LLVMValueRef decl = LLVMGetNamedGlobal(c->m, "mkpy_chk_sites"), n = LLVMGetNamedGlobal(c->m, "mkpy_chk_nsites");
    if (!decl || !n) return mkk_ir_fail(c, "the kernel lacks the checker's site table");
    LLVMValueRef *elems = malloc((size_t)c->nsites * sizeof *elems);
    if (!elems) return mkk_ir_fail(c, "out of memory");
    for (int i = 0; i < c->nsites; i++) {
        LLVMValueRef str = LLVMConstStringInContext(c->cx, c->site_text[i], (unsigned)strlen(c->site_text[i]), 0);
        LLVMValueRef g = LLVMAddGlobal(c->m, LLVMTypeOf(str), "mkpy.chk.site");
        LLVMSetInitializer(g, str);
        LLVMSetGlobalConstant(g, 1);
        LLVMSetLinkage(g, LLVMPrivateLinkage);
        LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
        elems[i] = g;
    }
    LLVMValueRef arr = LLVMConstArray(c->ptr, elems, (unsigned)c->nsites);
    free(elems);
    LLVMValueRef table = LLVMAddGlobal(c->m, LLVMTypeOf(arr), "mkpy.chk.sites");
    LLVMSetInitializer(table, arr);
    LLVMSetGlobalConstant(table, 1);
    LLVMSetLinkage(table, LLVMPrivateLinkage);
    LLVMReplaceAllUsesWith(decl, table);
    LLVMDeleteGlobal(decl);
    LLVMSetInitializer(n, LLVMConstInt(c->i32, (unsigned)c->nsites, 0));
    LLVMSetGlobalConstant(n, 1);
    LLVMSetLinkage(n, LLVMInternalLinkage);
    return 0;
}

/* "file:line:col" of the user's code an instruction belongs to. */
static void site_of(LLVMValueRef in, char *out, size_t n) {
    LLVMMetadataRef loc = LLVMInstructionGetDebugLoc(in);
    LLVMMetadataRef first = loc;
    snprintf(out, n, "?");
    for (; loc; loc = LLVMDILocationGetInlinedAt(loc)) {
        LLVMMetadataRef scope = LLVMDILocationGetScope(loc);
        LLVMMetadataRef file = scope ? LLVMDIScopeGetFile(scope) : NULL;
        unsigned len = 0;
        const char *fname = file ? LLVMDIFileGetFilename(file, &len) : NULL;
        if (fname && len > 8 && strncmp(fname, "<kernel ", 8) == 0) {
            snprintf(out, n, "%.*s:%u:%u", (int)len, fname, LLVMDILocationGetLine(loc), LLVMDILocationGetColumn(loc));
            return;
        }
    }
    if (first) {
        LLVMMetadataRef scope = LLVMDILocationGetScope(first);
        LLVMMetadataRef file = scope ? LLVMDIScopeGetFile(scope) : NULL;
        unsigned len = 0;
        const char *fname = file ? LLVMDIFileGetFilename(file, &len) : NULL;
        if (fname) snprintf(out, n, "%.*s:%u", (int)len, fname, LLVMDILocationGetLine(first));
    }
}

/* What a pointer is derived from: GEPs and casts stripped. */
static LLVMValueRef base_of(LLVMValueRef p) {
    for (int depth = 0; depth < 64; depth++) {
        if (LLVMIsAGetElementPtrInst(p) || LLVMIsABitCastInst(p) || LLVMIsAAddrSpaceCastInst(p)) {
            p = LLVMGetOperand(p, 0);
        } else if (LLVMIsAConstantExpr(p)) {
            LLVMOpcode op = LLVMGetConstOpcode(p);
            if (op != LLVMGetElementPtr && op != LLVMBitCast && op != LLVMAddrSpaceCast) break;
            p = LLVMGetOperand(p, 0);
        } else {
            break;
        }
    }
    return p;
}

/* Does every value a phi or select may give come from a local variable
 * (an alloca)? Cycles through the phi itself are ignored. */
static int all_local(LLVMValueRef v, LLVMValueRef *seen, int *nseen, int depth) {
    v = base_of(v);
    if (LLVMIsAAllocaInst(v)) return 1;
    if (depth > 8 || *nseen >= 32) return 0;
    for (int i = 0; i < *nseen; i++)
        if (seen[i] == v) return 1; /* a cycle: decided by the other inputs */
    if (LLVMIsAPHINode(v)) {
        seen[(*nseen)++] = v;
        unsigned n = LLVMCountIncoming(v);
        for (unsigned i = 0; i < n; i++)
            if (!all_local(LLVMGetIncomingValue(v, i), seen, nseen, depth + 1)) return 0;
        return n > 0;
    }
    if (LLVMIsASelectInst(v)) {
        seen[(*nseen)++] = v;
        return all_local(LLVMGetOperand(v, 1), seen, nseen, depth + 1) &&
               all_local(LLVMGetOperand(v, 2), seen, nseen, depth + 1);
    }
    return 0;
}

/* 1: instrument, tg set to the threadgroup variable if known; 0: the access
 * is to a thread's own variable, the launch data or a constant. */
static int classify(LLVMValueRef p, LLVMValueRef *tg) {
    LLVMValueRef b = base_of(p);
    *tg = NULL;
    if (LLVMIsAAllocaInst(b)) return 0;
    if (LLVMIsAPHINode(b) || LLVMIsASelectInst(b)) {
        LLVMValueRef seen[32];
        int nseen = 0;
        if (all_local(b, seen, &nseen, 0)) return 0;
    }
    if (LLVMIsAArgument(b)) {
        const char *fn = mkk_ir_name(LLVMGetParamParent(b));
        if (strncmp(fn, "mkpy_kernel_", 12) == 0) return 0; /* args[], the launch */
        return 1;
    }
    if (LLVMIsAGlobalVariable(b)) {
        if (!LLVMIsThreadLocal(b)) return 0; /* constants */
        *tg = b;
        return 1;
    }
    return 1;
}

/* A threadgroup variable's name from its mangled name (a static local
 * `_ZZ...E1t`, possibly with a `_0` discriminator). */
static void tg_name(LLVMValueRef g, char *out, size_t n) {
    const char *s = mkk_ir_name(g);
    size_t L = strlen(s);
    snprintf(out, n, "%s", s);
    for (size_t i = L; i-- > 0;) {
        if (s[i] != 'E' || !isdigit((unsigned char)s[i + 1])) continue;
        char *end;
        unsigned long len = strtoul(s + i + 1, &end, 10);
        size_t rest = L - (size_t)(end - s);
        if (len <= rest && (len == rest || end[len] == '_')) {
            snprintf(out, n, "%.*s", (int)len, end);
            return;
        }
    }
}

/* Bytes per element of a threadgroup variable: its innermost array element,
 * a vector's scalar, or 4 bytes of a struct. */
static uint64_t tg_elem(chk *c, LLVMValueRef g) {
    LLVMTypeRef t = LLVMGlobalGetValueType(g);
    while (LLVMGetTypeKind(t) == LLVMArrayTypeKind) t = LLVMGetElementType(t);
    if (LLVMGetTypeKind(t) == LLVMVectorTypeKind) t = LLVMGetElementType(t);
    uint64_t s = LLVMABISizeOfType(c->td, t);
    if (LLVMGetTypeKind(t) == LLVMStructTypeKind) s = s % 4 == 0 ? 4 : 1;
    return s ? s : 1;
}

static LLVMValueRef ci32(chk *c, uint64_t v) { return LLVMConstInt(c->i32, v, 0); }
static LLVMValueRef ci64(chk *c, uint64_t v) { return LLVMConstInt(c->i64, v, 0); }

/* Instruments the access of instruction `in` through its operand `op`. */
/* The thread argument of a hook called in function fn. */
static LLVMValueRef thread_arg(chk *c, LLVMValueRef fn) {
    return fn == c->root ? c->root_thread : LLVMConstNull(c->ptr);
}

static void guard_access(chk *c, LLVMValueRef in, unsigned op, LLVMValueRef size, uint32_t flags) {
    LLVMValueRef p = LLVMGetOperand(in, op), tg;
    if (LLVMGetTypeKind(LLVMTypeOf(p)) != LLVMPointerTypeKind) return;
    if (LLVMGetPointerAddressSpace(LLVMTypeOf(p)) != 0) return;
    if (!classify(p, &tg)) return;
    char where[600];
    site_of(in, where, sizeof where);
    LLVMPositionBuilderBefore(c->b, in);
    LLVMSetCurrentDebugLocation2(c->b, LLVMInstructionGetDebugLoc(in));
    LLVMValueRef args[] = {p, size, ci32(c, flags), site_index(c, where), tg ? tg : LLVMConstNull(c->ptr),
                           thread_arg(c, LLVMGetBasicBlockParent(LLVMGetInstructionParent(in)))};
    LLVMValueRef q = LLVMBuildCall2(c->b, c->ty_access, c->fn_access, args, 6, "");
    LLVMSetOperand(in, op, q);
}

static uint64_t store_size(chk *c, LLVMTypeRef t) { return LLVMStoreSizeOfType(c->td, t); }

static int is_const_safe_divisor(LLVMValueRef d, int is_signed) {
    if (!LLVMIsAConstantInt(d)) return 0;
    if (LLVMConstIntGetZExtValue(d) == 0) return 0;
    if (is_signed && LLVMConstIntGetSExtValue(d) == -1) return 0;
    return 1;
}

/* Any lane of an i1 (vector) value set, as an i1. */
static LLVMValueRef any_lane(chk *c, LLVMValueRef v) {
    LLVMTypeRef t = LLVMTypeOf(v);
    if (LLVMGetTypeKind(t) != LLVMVectorTypeKind) return v;
    unsigned n = LLVMGetVectorSize(t);
    LLVMValueRef bits = LLVMBuildBitCast(c->b, v, LLVMIntTypeInContext(c->cx, n), "");
    return LLVMBuildICmp(c->b, LLVMIntNE, bits, LLVMConstNull(LLVMTypeOf(bits)), "");
}

static void guard_div(chk *c, LLVMValueRef in, int is_signed) {
    LLVMValueRef a = LLVMGetOperand(in, 0), d = LLVMGetOperand(in, 1);
    if (LLVMGetTypeKind(LLVMTypeOf(d)) != LLVMVectorTypeKind && is_const_safe_divisor(d, is_signed)) return;
    char where[600];
    site_of(in, where, sizeof where);
    LLVMPositionBuilderBefore(c->b, in);
    LLVMSetCurrentDebugLocation2(c->b, LLVMInstructionGetDebugLoc(in));
    LLVMTypeRef t = LLVMTypeOf(d);
    LLVMValueRef zero = any_lane(c, LLVMBuildICmp(c->b, LLVMIntEQ, d, LLVMConstNull(t), ""));
    LLVMValueRef bad = LLVMBuildZExt(c->b, zero, c->i32, "");
    if (is_signed) {
        LLVMTypeRef et = LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
        unsigned w = LLVMGetIntTypeWidth(et);
        /* INT_MIN of the type, its top bit alone (LLVM 19 has no LLVMConstShl) */
        uint64_t words[4] = {0};
        unsigned nw = w <= 256 ? (w + 63) / 64 : 1;
        if (w <= 256) words[(w - 1) / 64] = 1ull << ((w - 1) % 64);
        LLVMValueRef minv = LLVMConstIntOfArbitraryPrecision(et, nw, words);
        LLVMValueRef ones = LLVMConstAllOnes(et);
        if (LLVMGetTypeKind(t) == LLVMVectorTypeKind) {
            unsigned n = LLVMGetVectorSize(t);
            LLVMValueRef *mv = malloc(n * sizeof *mv), *ov = malloc(n * sizeof *ov);
            for (unsigned i = 0; i < n; i++) {
                mv[i] = minv;
                ov[i] = ones;
            }
            minv = LLVMConstVector(mv, n);
            ones = LLVMConstVector(ov, n);
            free(mv);
            free(ov);
        }
        LLVMValueRef ovf = LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntEQ, a, minv, ""),
                                        LLVMBuildICmp(c->b, LLVMIntEQ, d, ones, ""), "");
        ovf = LLVMBuildZExt(c->b, any_lane(c, ovf), c->i32, "");
        bad = LLVMBuildOr(c->b, bad, LLVMBuildShl(c->b, ovf, ci32(c, 1), ""), "");
        /* a zero divisor wins */
        bad = LLVMBuildSelect(c->b, zero, ci32(c, 1), bad, "");
    }
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInstructionParent(in));
    LLVMValueRef args[] = {bad, site_index(c, where), thread_arg(c, fn)};
    LLVMBuildCall2(c->b, c->ty_div, c->fn_div, args, 3, "");
}

static void after_call(chk *c, LLVMValueRef in) {
    LLVMValueRef next = LLVMGetNextInstruction(in);
    if (next)
        LLVMPositionBuilderBefore(c->b, next);
    else
        LLVMPositionBuilderAtEnd(c->b, LLVMGetInstructionParent(in));
    LLVMSetCurrentDebugLocation2(c->b, LLVMInstructionGetDebugLoc(in));
}

static void instrument(chk *c, LLVMValueRef fn) {
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;) {
            LLVMValueRef next = LLVMGetNextInstruction(in);
            if (LLVMIsALoadInst(in)) {
                uint32_t f = LLVMGetOrdering(in) != LLVMAtomicOrderingNotAtomic ? MKPY_CHK_ATOMIC : 0;
                guard_access(c, in, 0, ci64(c, store_size(c, LLVMTypeOf(in))), MKPY_CHK_READ | f);
            } else if (LLVMIsAStoreInst(in)) {
                uint32_t f = LLVMGetOrdering(in) != LLVMAtomicOrderingNotAtomic ? MKPY_CHK_ATOMIC : 0;
                guard_access(c, in, 1, ci64(c, store_size(c, LLVMTypeOf(LLVMGetOperand(in, 0)))),
                             MKPY_CHK_WRITE | f);
            } else if (LLVMIsAAtomicRMWInst(in) || LLVMIsAAtomicCmpXchgInst(in)) {
                guard_access(c, in, 0, ci64(c, store_size(c, LLVMTypeOf(LLVMGetOperand(in, 1)))),
                             MKPY_CHK_WRITE | MKPY_CHK_ATOMIC);
            } else if (LLVMIsACallInst(in)) {
                LLVMValueRef callee = LLVMGetCalledValue(in);
                const char *n = LLVMIsAFunction(callee) ? mkk_ir_name(callee) : "";
                if (callee == c->sync_barrier && c->sync_barrier) {
                    after_call(c, in);
                    LLVMValueRef t = thread_arg(c, fn);
                    LLVMBuildCall2(c->b, c->ty_barrier, c->fn_barrier, &t, 1, "");
                } else if (callee == c->sync_tg_alloc && c->sync_tg_alloc) {
                    LLVMValueRef g = base_of(LLVMGetOperand(in, 0));
                    char name[256] = "threadgroup memory";
                    uint64_t elem = 1;
                    if (LLVMIsAGlobalVariable(g)) {
                        tg_name(g, name, sizeof name);
                        elem = tg_elem(c, g);
                    }
                    after_call(c, in);
                    LLVMValueRef args[] = {LLVMGetOperand(in, 0), LLVMGetOperand(in, 1), ci64(c, elem),
                                           site_index(c, name), thread_arg(c, fn)};
                    LLVMBuildCall2(c->b, c->ty_tg, c->fn_tg, args, 5, "");
                } else if (strncmp(n, "llvm.memcpy", 11) == 0 || strncmp(n, "llvm.memmove", 12) == 0) {
                    LLVMValueRef len = LLVMGetOperand(in, 2);
                    if (LLVMTypeOf(len) != c->i64) {
                        LLVMPositionBuilderBefore(c->b, in);
                        len = LLVMBuildZExt(c->b, len, c->i64, "");
                    }
                    guard_access(c, in, 0, len, MKPY_CHK_WRITE);
                    guard_access(c, in, 1, len, MKPY_CHK_READ);
                } else if (strncmp(n, "llvm.memset", 11) == 0) {
                    LLVMValueRef len = LLVMGetOperand(in, 2);
                    if (LLVMTypeOf(len) != c->i64) {
                        LLVMPositionBuilderBefore(c->b, in);
                        len = LLVMBuildZExt(c->b, len, c->i64, "");
                    }
                    guard_access(c, in, 0, len, MKPY_CHK_WRITE);
                }
            } else {
                LLVMOpcode op = LLVMGetInstructionOpcode(in);
                if (op == LLVMSDiv || op == LLVMSRem)
                    guard_div(c, in, 1);
                else if (op == LLVMUDiv || op == LLVMURem)
                    guard_div(c, in, 0);
            }
            in = next;
        }
    }
}

int mkk_check_build(const char *bc_path, const char *obj_path, char *why, size_t whyn) {
    chk C = {0}, *c = &C;
    c->why = why;
    c->whyn = whyn;
    why[0] = 0;
    int rc = -1;
    mkk_ir_module mod = {0};

    c->cx = LLVMContextCreate();
    c->b = LLVMCreateBuilderInContext(c->cx);
    if (mkk_ir_load(c->cx, bc_path, &mod, why, whyn) < 0) goto done;
    c->m = mod.m;
    c->td = LLVMGetModuleDataLayout(c->m);
    c->i1 = LLVMInt1TypeInContext(c->cx);
    c->i32 = LLVMInt32TypeInContext(c->cx);
    c->i64 = LLVMInt64TypeInContext(c->cx);
    c->ptr = LLVMPointerTypeInContext(c->cx, 0);
    c->voidt = LLVMVoidTypeInContext(c->cx);
    c->fn_access = LLVMGetNamedFunction(c->m, "mkpy_chk_access");
    c->fn_tg = LLVMGetNamedFunction(c->m, "mkpy_chk_tg");
    c->fn_barrier = LLVMGetNamedFunction(c->m, "mkpy_chk_barrier");
    c->fn_div = LLVMGetNamedFunction(c->m, "mkpy_chk_div");
    c->root = LLVMGetNamedFunction(c->m, ROOT);
    if (!c->fn_access || !c->fn_tg || !c->fn_barrier || !c->fn_div || !c->root || LLVMIsDeclaration(c->root) ||
        LLVMCountParams(c->root) != 3) {
        mkk_ir_fail(c, "the kernel lacks the checker's hooks");
        goto done;
    }
    c->ty_access = LLVMGlobalGetValueType(c->fn_access);
    c->ty_tg = LLVMGlobalGetValueType(c->fn_tg);
    c->ty_barrier = LLVMGlobalGetValueType(c->fn_barrier);
    c->ty_div = LLVMGlobalGetValueType(c->fn_div);

    /* 1. inline what kernel code calls, locals into values */
    {
        unsigned always = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
        unsigned never = LLVMGetEnumAttributeKindForName("noinline", 8);
        unsigned optnone = LLVMGetEnumAttributeKindForName("optnone", 7);
        for (LLVMValueRef fn = LLVMGetFirstFunction(c->m); fn; fn = LLVMGetNextFunction(fn)) {
            if (LLVMIsDeclaration(fn) || skipped_fn(mkk_ir_name(fn)) || fn == c->root) continue;
            LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, never);
            LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, optnone);
            LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(c->cx, always, 0));
        }
        LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
        LLVMErrorRef e = LLVMRunPasses(c->m, "always-inline,function(sroa,instsimplify)", mod.tm, o);
        LLVMDisposePassBuilderOptions(o);
        if (e) {
            char *msg = LLVMGetErrorMessage(e);
            mkk_ir_fail(c, "inlining failed: %s", msg);
            LLVMDisposeErrorMessage(msg);
            goto done;
        }
    }
    c->sync_barrier = LLVMGetNamedFunction(c->m, "mkpy_sync_barrier");
    c->sync_tg_alloc = LLVMGetNamedFunction(c->m, "mkpy_sync_threadgroup_alloc");
    /* the checker runs on fibers: their release order, as for the fiber
     * engine (if the body cannot be ranked, the fibers keep the text's order) */
    if (mkk_ir_order_sites(c->cx, c->m, c->root, why, whyn) < 0) why[0] = 0;

    /* 2-4. the hooks */
    c->root_thread = LLVMGetParam(c->root, 2);
    site_index(c, "?");
    for (LLVMValueRef fn = LLVMGetFirstFunction(c->m); fn; fn = LLVMGetNextFunction(fn)) {
        if (LLVMIsDeclaration(fn) || skipped_fn(mkk_ir_name(fn))) continue;
        instrument(c, fn);
    }
    /* 5. the site table; the body is now inlined into its loops (so that
     * the attributes it does not use are never built, and the loop steps
     * the rest) */
    if (define_sites(c) < 0) goto done;
    {
        unsigned never = LLVMGetEnumAttributeKindForName("noinline", 8);
        unsigned always = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
        LLVMRemoveEnumAttributeAtIndex(c->root, LLVMAttributeFunctionIndex, never);
        LLVMAddAttributeAtIndex(c->root, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(c->cx, always, 0));
    }

    if (mkk_ir_finish(c->m, mod.tm, obj_path, -1, "check.ll", NULL, why, whyn) < 0) goto done;
    rc = 0;
done:
    for (int i = 0; i < c->nsites; i++) free(c->site_text[i]);
    free(c->site_text);
    mkk_ir_dispose(&mod);
    LLVMDisposeBuilder(c->b);
    LLVMContextDispose(c->cx);
    return rc;
}
