/* The region-splitting engine's compiler pass, on LLVM IR through LLVM's C API.
 *
 * Input: the bitcode of one kernel's C++ (jit.c builds it with -emit-llvm).
 * It defines mkpy_kernel_cbs_thread(args, launch, group, index, resume, ctx),
 * where `group` points at the group's coordinates (mkpy_kernel_cbs_group
 * computes them once per run), which runs GPU thread `index` of a
 * threadgroup from start to end and calls
 * the runtime at four named points (mkpy_coop.h): mkpy_sync_barrier,
 * mkpy_sync_simd_barrier, mkpy_sync_exchange (every SIMD-group and
 * quad-group function) and mkpy_sync_threadgroup_alloc.
 *
 * Output: an object file with the same code plus
 *   mkpy_kernel_cbs_run(site, args, launch, group, ctx, next, count), and
 *   mkpy_kernel_cbs_info (mkpy_launch.h),
 * which run a threadgroup without a stack per thread: continuation-based
 * synchronisation (Karrenberg & Hack, CC 2012), the scheme of PoCL's and
 * AdaptiveCpp's CPU back ends.
 *
 * The steps, on the thread function F:
 *   1. everything F calls is inlined (a runtime point left in a called
 *      function, by recursion say, makes the kernel fall back to fibers);
 *   2. each runtime point becomes a resume point ("site"): its block is
 *      split after it. Threadgroup allocations are dropped and their sizes
 *      summed into the info (the 32 KiB check happens before launch);
 *   3. lockstep: where two memory operations of one region (the code a
 *      thread can run from one site to the next) may touch the same memory,
 *      one of them a write, a "step" site is put between them. A region then
 *      gives the same memory effects whatever the order of its threads, and
 *      the runtime releases sites in thread-frontier order (below): the
 *      result is that of SIMD-groups running in lockstep (docs/kernels.md);
 *   4. values a thread needs across a site are demoted to its slot in the
 *      context frame (ctx->frame), and so is every alloca; a group-uniform
 *      slot read in a dense run comes from thread 0's copy (ctx->uni);
 *   5. F gets a dispatch on `resume` at its entry, and each site returns its
 *      number (MKPY_CBS_DONE at the end);
 *   6. mkpy_kernel_cbs_run holds, per site, a loop over the threads of the
 *      group with F inlined at that site: the "work-item loop" that LLVM's
 *      loop vectoriser can turn into SIMD code across threads. Past the
 *      compile budget (sites x instructions) it is the compact form instead:
 *      two loops (every thread; the threads at the released site), F
 *      inlined once in each and entered through its switch on the site.
 *
 * Release order ("thread frontiers", Diamos et al., MICRO 2011): blocks are
 * ranked in a topological order of the CFG without back edges, where every
 * block of a loop comes before the loop's exits; the runtime always releases
 * the waiting site of lowest rank. So the body of a divergent branch or loop
 * runs before the code after it, as with a GPU's reconvergence. */
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

#define MAX_SITES 4096
#define MKK_CBS_BUDGET 45056 /* (resume points) x (instructions): see the compile budget below */
#define MKK_CBS_COMPACT_NESTS 2 /* the compact form's work-item loop nests */
#define MKK_CBS_COMPACT_BUDGET 24576 /* (nests + 1) x (instructions), for the compact form */
#define MAX_STEPS 512

typedef struct {
    LLVMContextRef cx;
    LLVMModuleRef m;
    LLVMBuilderRef b;
    LLVMTargetDataRef td;
    LLVMTargetMachineRef tm;
    LLVMValueRef f;        /* the thread function being transformed */
    LLVMValueRef entry;    /* our new entry block's terminator's block (E') */
    LLVMBasicBlockRef eb;  /* E' */
    LLVMTypeRef i8, i32, i64, ptr, voidt;
    LLVMValueRef fn_barrier, fn_simd_barrier, fn_exchange, fn_tg_alloc, fn_step;
    LLVMValueRef fn_loop_step; /* a step of add_loop_steps: kept in dense runs only */
    /* CFG snapshot */
    int nblocks;
    LLVMBasicBlockRef *blocks;
    int *nsucc, **succ;
    int *rank; /* thread-frontier rank per block index */
    /* the frame: values and allocas kept per thread across sites */
    LLVMValueRef frame_base, index64, e_br;
    LLVMValueRef *slot_vals, *slot_addrs; /* a value (or alloca) and its slot's address, built in E' */
    char *slot_memory;                    /* 1 where the slot replaces an alloca: memory, not a value */
    int nslot_addrs, slot_addr_cap;
    unsigned long long *slot_offs;        /* a slot's offset in a thread's frame layout */
    unsigned long long *slot_sizes;       /* its bytes per thread (the stride between threads' copies) */
    unsigned long long frame; /* bytes per thread */
    /* group-uniform slots (see preloadable): dense runs read thread 0's copy */
    char *dom;      /* nblocks^2: dom[a * n + b] when block a dominates b */
    int dom_n;
    int *uni_slots, nuni, uni_cap;
    int readonly_args; /* mkpy_cbs_readonly_args: the leading args that are inputs */
    int *site_heads, nsite_heads; /* site i (resume value i + 1): its head block's index */
    /* a load value_at built for a group-uniform slot (through ctx->uni, or
     * the thread's slot) and the value it stands for: a later value_at of
     * the load is one of that value */
    LLVMValueRef *uni_loads, *uni_of;
    int nuni_loads, uni_loads_cap;
    /* x-affine slots (see affine_candidate): the slot, and the sites where
     * a read of it may be thread 0's copy plus the thread's index */
    int *aff_slots, naff, aff_cap;
    char *aff_ok; /* naff rows of nsite_heads */
    char *why;
    size_t whyn;
} pass;

static LLVMValueRef callee(LLVMValueRef inst) {
    if (!LLVMIsACallInst(inst)) return NULL;
    return LLVMGetCalledValue(inst);
}

static int is_sync_fn(pass *p, LLVMValueRef fn) {
    return fn && (fn == p->fn_barrier || fn == p->fn_simd_barrier || fn == p->fn_exchange || fn == p->fn_step ||
                  fn == p->fn_loop_step);
}

static int sync_kind(pass *p, LLVMValueRef inst) {
    LLVMValueRef fn = callee(inst);
    if (!fn) return 0;
    if (fn == p->fn_barrier) return MKPY_CBS_BARRIER;
    if (fn == p->fn_simd_barrier) return MKPY_CBS_SIMD_BARRIER;
    if (fn == p->fn_exchange) return MKPY_CBS_EXCHANGE;
    if (fn == p->fn_step || (fn && fn == p->fn_loop_step)) return MKPY_CBS_STEP;
    return 0;
}

/* ------------------------------------------------------------ inlining */

/* Is the called value a function of the runtime's table, mkpy::api->f
 * (a load through the global mkpy::api, as a printing kernel's log_at
 * calls api->print)? Those reach no runtime point of the kernel. */
static int runtime_table_call(LLVMValueRef c) {
    if (!LLVMIsALoadInst(c)) return 0;
    LLVMValueRef a = LLVMGetOperand(c, 0);
    while (LLVMIsAGetElementPtrInst(a) || (LLVMIsAConstantExpr(a) && LLVMGetConstOpcode(a) == LLVMGetElementPtr))
        a = LLVMGetOperand(a, 0);
    if (!LLVMIsALoadInst(a)) return 0;
    LLVMValueRef g = LLVMGetOperand(a, 0);
    return LLVMIsAGlobalVariable(g) && strcmp(mkk_ir_name(g), "_ZN4mkpy3apiE") == 0;
}

/* Does fn (a definition) reach a runtime point through calls? */
static int reaches_sync(pass *p, LLVMValueRef fn, LLVMValueRef *seen, int *nseen) {
    for (int i = 0; i < *nseen; i++)
        if (seen[i] == fn) return 0;
    if (*nseen >= 4096) return 1;
    seen[(*nseen)++] = fn;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            if (LLVMIsACallInst(in) || LLVMIsAInvokeInst(in)) {
                LLVMValueRef c = LLVMGetCalledValue(in);
                if (!LLVMIsAFunction(c)) {
                    /* an indirect call: could reach anything */
                    if (!LLVMIsAInlineAsm(c) && !runtime_table_call(c)) return 1;
                    continue;
                }
                if (is_sync_fn(p, c)) return 1;
                if (!LLVMIsDeclaration(c) && reaches_sync(p, c, seen, nseen)) return 1;
            }
        }
    return 0;
}

/* The runtime points of the module (the optimiser may drop what nothing
 * calls, so they are looked up again after it ran). */
static void find_points(pass *p) {
    p->fn_barrier = LLVMGetNamedFunction(p->m, "mkpy_sync_barrier");
    p->fn_simd_barrier = LLVMGetNamedFunction(p->m, "mkpy_sync_simd_barrier");
    p->fn_exchange = LLVMGetNamedFunction(p->m, "mkpy_sync_exchange");
    p->fn_tg_alloc = LLVMGetNamedFunction(p->m, "mkpy_sync_threadgroup_alloc");
}

/* fn is inlined wherever it is called (always-inline). */
static void force_inline(pass *p, LLVMValueRef fn) {
    LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMGetEnumAttributeKindForName("noinline", 8));
    LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMGetEnumAttributeKindForName("optnone", 7));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(p->cx, LLVMGetEnumAttributeKindForName("alwaysinline", 12), 0));
}

/* Runs an LLVM pipeline that inlines (the vectorisers off). */
static int run_inliner(pass *p, const char *pipeline) {
    LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(o, 0);
    LLVMPassBuilderOptionsSetSLPVectorization(o, 0);
    LLVMErrorRef e = LLVMRunPasses(p->m, pipeline, p->tm, o);
    LLVMDisposePassBuilderOptions(o);
    if (e) {
        char *msg = LLVMGetErrorMessage(e);
        mkk_ir_fail(p, "inlining failed: %s", msg);
        LLVMDisposeErrorMessage(msg);
        return -1;
    }
    return 0;
}

static int inline_all(pass *p) {
    for (LLVMValueRef fn = LLVMGetFirstFunction(p->m); fn; fn = LLVMGetNextFunction(fn)) {
        if (LLVMIsDeclaration(fn) || fn == p->f || is_sync_fn(p, fn) || fn == p->fn_tg_alloc) continue;
        const char *n = mkk_ir_name(fn);
        if (strncmp(n, "mkpy_kernel_", 12) == 0 || strcmp(n, "mkpy_sync_order") == 0) continue;
        force_inline(p, fn);
    }
    /* everything inlined into F, then optimised (unrolled, scalarised) as
     * usual: the runtime points are noduplicate and nomerge, so no pass
     * copies or merges them */
    if (run_inliner(p, "always-inline,default<O2>") < 0) return -1;
    /* whatever F still calls must not reach a runtime point */
    LLVMValueRef *seen = malloc(4096 * sizeof *seen);
    if (!seen) return mkk_ir_fail(p, "out of memory");
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            if (LLVMIsAInvokeInst(in)) {
                free(seen);
                return mkk_ir_fail(p, "the kernel uses exceptions");
            }
            if (!LLVMIsACallInst(in)) continue;
            LLVMValueRef c = LLVMGetCalledValue(in);
            if (LLVMIsAFunction(c) && (is_sync_fn(p, c) || c == p->fn_tg_alloc || LLVMIsDeclaration(c))) continue;
            if (LLVMIsAInlineAsm(c) || runtime_table_call(c)) continue;
            int nseen = 0;
            if (!LLVMIsAFunction(c) || reaches_sync(p, c, seen, &nseen)) {
                free(seen);
                return mkk_ir_fail(p, "a barrier or SIMD-group function is reached through a call that cannot be "
                               "inlined (recursion or a function pointer)");
            }
        }
    free(seen);
    return 0;
}

/* ------------------------------------------------------------ CFG */

static void cfg_free(pass *p) {
    for (int i = 0; i < p->nblocks; i++) free(p->succ[i]);
    free(p->blocks);
    free(p->nsucc);
    free(p->succ);
    free(p->rank);
    p->blocks = NULL;
    p->nsucc = NULL;
    p->succ = NULL;
    p->rank = NULL;
    p->nblocks = 0;
}

static int block_index(pass *p, LLVMBasicBlockRef bb) {
    for (int i = 0; i < p->nblocks; i++)
        if (p->blocks[i] == bb) return i;
    return -1;
}

/* Snapshot of F's blocks (layout order; 0 is the entry), successors, and
 * the thread-frontier rank of every block. */
static int cfg_build(pass *p) {
    cfg_free(p);
    int n = (int)LLVMCountBasicBlocks(p->f);
    p->nblocks = n;
    p->blocks = calloc((size_t)n, sizeof *p->blocks);
    p->nsucc = calloc((size_t)n, sizeof *p->nsucc);
    p->succ = calloc((size_t)n, sizeof *p->succ);
    p->rank = calloc((size_t)n, sizeof *p->rank);
    if (!p->blocks || !p->nsucc || !p->succ || !p->rank) return mkk_ir_fail(p, "out of memory");
    LLVMGetBasicBlocks(p->f, p->blocks);
    for (int i = 0; i < n; i++) {
        LLVMValueRef t = LLVMGetBasicBlockTerminator(p->blocks[i]);
        if (!t) return mkk_ir_fail(p, "a block without terminator");
        int ns = (int)LLVMGetNumSuccessors(t);
        p->succ[i] = calloc((size_t)ns + 1, sizeof(int));
        if (!p->succ[i]) return mkk_ir_fail(p, "out of memory");
        for (int s = 0; s < ns; s++) {
            int j = block_index(p, LLVMGetSuccessor(t, (unsigned)s));
            if (j < 0) return mkk_ir_fail(p, "a successor outside the function");
            p->succ[i][p->nsucc[i]++] = j;
        }
    }

    /* DFS from the entry: back edges (to a block on the stack) */
    int *state = calloc((size_t)n, sizeof(int)), *stack = malloc(sizeof(int) * (size_t)n),
        *pos = calloc((size_t)n, sizeof(int));
    char *back = calloc((size_t)n * (size_t)n, 1); /* back[i*n+j]: i->j is a back edge */
    char *inloop = calloc((size_t)n * (size_t)n, 1);
    int *indeg = calloc((size_t)n, sizeof(int));
    char *edge = calloc((size_t)n * (size_t)n, 1);
    int rc = 0;
    if (!state || !stack || !pos || !back || !inloop || !indeg || !edge) {
        rc = mkk_ir_fail(p, "out of memory");
        goto out;
    }
    int sp = 0;
    stack[sp++] = 0;
    state[0] = 1;
    while (sp) {
        int u = stack[sp - 1];
        if (pos[u] < p->nsucc[u]) {
            int v = p->succ[u][pos[u]++];
            if (state[v] == 1)
                back[u * n + v] = 1;
            else if (state[v] == 0) {
                state[v] = 1;
                stack[sp++] = v;
            }
        } else {
            state[u] = 2;
            sp--;
        }
    }
    /* natural loop of each back edge u->h: blocks reaching u without h */
    for (int u = 0; u < n; u++)
        for (int h = 0; h < n; h++) {
            if (!back[u * n + h]) continue;
            char *in = inloop + (size_t)h * n; /* union per header */
            in[h] = 1;
            int top = 0;
            if (!in[u]) {
                in[u] = 1;
                stack[top++] = u;
            }
            while (top) {
                int x = stack[--top];
                for (int y = 0; y < n; y++) /* predecessors of x */
                    for (int s = 0; s < p->nsucc[y]; s++)
                        if (p->succ[y][s] == x && !in[y] && state[y]) {
                            in[y] = 1;
                            stack[top++] = y;
                        }
            }
        }
    /* the ranking DAG: forward edges, plus loop block -> loop exit */
    for (int u = 0; u < n; u++)
        for (int s = 0; s < p->nsucc[u]; s++) {
            int v = p->succ[u][s];
            if (!back[u * n + v]) edge[u * n + v] = 1;
        }
    for (int h = 0; h < n; h++) {
        char *in = inloop + (size_t)h * n;
        if (!in[h]) continue;
        for (int x = 0; x < n; x++) {
            if (!in[x]) continue;
            for (int s = 0; s < p->nsucc[x]; s++) {
                int e = p->succ[x][s];
                if (in[e]) continue;
                for (int y = 0; y < n; y++)
                    if (in[y] && y != h) edge[y * n + e] = 1;
                edge[h * n + e] = 1;
            }
        }
    }
    for (int u = 0; u < n; u++)
        for (int v = 0; v < n; v++) indeg[v] += edge[u * n + v];
    /* Kahn's algorithm; among the ready blocks the one earliest in the
     * user's text goes first (so the `if` side of a divergent branch runs
     * before the `else` side, whatever order the optimiser left them in) */
    long long *key = malloc(sizeof *key * (size_t)n);
    if (!key) {
        rc = mkk_ir_fail(p, "out of memory");
        goto out;
    }
    long long last = 0;
    for (int i = 0; i < n; i++) {
        key[i] = -1;
        for (LLVMValueRef in = LLVMGetFirstInstruction(p->blocks[i]); in && key[i] < 0;
             in = LLVMGetNextInstruction(in)) {
            unsigned len = 0;
            const char *file = LLVMGetDebugLocFilename(in, &len);
            unsigned line = LLVMGetDebugLocLine(in);
            if (!file || !line || len < 8 || strncmp(file, "<kernel ", 8) != 0) continue;
            int rank = memmem(file, len, "header>", 7) ? 0 : memmem(file, len, "source>", 7) ? 1 : 2;
            key[i] = ((long long)rank << 40) | ((long long)line << 16) | (LLVMGetDebugLocColumn(in) & 0xffff);
        }
        if (key[i] < 0)
            key[i] = last; /* no line of the user's own: as the block before it */
        else
            last = key[i];
    }
    for (int i = 0; i < n; i++) p->rank[i] = -1;
    for (int r = 0; r < n; r++) {
        int pick = -1;
        for (int v = 0; v < n; v++)
            if (p->rank[v] < 0 && indeg[v] == 0 && (pick < 0 || key[v] < key[pick])) pick = v;
        if (pick < 0) {
            free(key);
            rc = mkk_ir_fail(p, "the control flow is irreducible");
            goto out;
        }
        p->rank[pick] = r;
        for (int v = 0; v < n; v++)
            if (edge[pick * n + v]) indeg[v]--;
    }
    free(key);
out:
    free(state);
    free(stack);
    free(pos);
    free(back);
    free(inloop);
    free(indeg);
    free(edge);
    return rc;
}

/* ------------------------------------------------------------ splitting */

/* Splits the block of `inst` so that `inst` is the last instruction before
 * an unconditional branch: the head (phis ... inst) moves to a new block
 * placed before, and the predecessors are retargeted to it. Returns the head. */
static LLVMBasicBlockRef split_after(pass *p, LLVMValueRef inst) {
    LLVMBasicBlockRef bb = LLVMGetInstructionParent(inst);
    LLVMBasicBlockRef head = LLVMInsertBasicBlockInContext(p->cx, bb, "cbs.site");
    /* retarget every edge into bb (it is never the entry: E' is) */
    for (LLVMBasicBlockRef x = LLVMGetFirstBasicBlock(p->f); x; x = LLVMGetNextBasicBlock(x)) {
        LLVMValueRef t = LLVMGetBasicBlockTerminator(x);
        if (!t || x == head) continue;
        unsigned ns = LLVMGetNumSuccessors(t);
        for (unsigned s = 0; s < ns; s++)
            if (LLVMGetSuccessor(t, s) == bb) LLVMSetSuccessor(t, s, head);
    }
    /* move the instructions up to inst */
    LLVMValueRef stop = LLVMGetNextInstruction(inst);
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in && in != stop;) {
        LLVMValueRef next = LLVMGetNextInstruction(in);
        LLVMInstructionRemoveFromParent(in);
        LLVMPositionBuilderAtEnd(p->b, head);
        LLVMInsertIntoBuilder(p->b, in);
        in = next;
    }
    LLVMPositionBuilderAtEnd(p->b, head);
    LLVMBuildBr(p->b, bb);
    return head;
}

/* ------------------------------------------------------------ memory */

enum { OBJ_PRIVATE, OBJ_RUNTIME, OBJ_GLOBAL, OBJ_BUFFER, OBJ_UNKNOWN };
typedef struct {
    int kind;
    LLVMValueRef base; /* the global, or the buffer's index as a constant */
    long index;
} mem_obj;

/* The pointer v is an offset of, through GEPs and casts (stopping at `stop`). */
static LLVMValueRef pointer_root(LLVMValueRef v, LLVMValueRef stop) {
    for (int depth = 0; depth < 64 && v != stop; depth++) {
        if (LLVMIsAGetElementPtrInst(v) || LLVMIsABitCastInst(v) || LLVMIsAAddrSpaceCastInst(v)) {
            v = LLVMGetOperand(v, 0);
            continue;
        }
        if (LLVMIsAConstantExpr(v)) {
            LLVMOpcode op = LLVMGetConstOpcode(v);
            if (op == LLVMGetElementPtr || op == LLVMBitCast || op == LLVMAddrSpaceCast) {
                v = LLVMGetOperand(v, 0);
                continue;
            }
        }
        break;
    }
    return v;
}

static mem_obj underlying(pass *p, LLVMValueRef v) {
    mem_obj o = {OBJ_UNKNOWN, NULL, -1};
    v = pointer_root(v, NULL);
    if (LLVMIsAAllocaInst(v)) {
        o.kind = OBJ_PRIVATE;
        return o;
    }
    if (LLVMIsAGlobalVariable(v)) {
        if (LLVMIsGlobalConstant(v)) {
            o.kind = OBJ_PRIVATE; /* read-only data never conflicts */
            return o;
        }
        o.kind = OBJ_GLOBAL;
        o.base = v;
        return o;
    }
    if (LLVMIsAArgument(v)) {
        /* the args array and the launch are read-only; ctx (param 5) is
         * the runtime's: per-thread slots */
        if (v == LLVMGetParam(p->f, 0) || v == LLVMGetParam(p->f, 1))
            o.kind = OBJ_PRIVATE;
        else if (v == LLVMGetParam(p->f, 5))
            o.kind = OBJ_RUNTIME;
        return o;
    }
    if (LLVMIsACallInst(v) && LLVMGetCalledValue(v) == p->fn_exchange) {
        o.kind = OBJ_RUNTIME; /* the released exchange buffer */
        return o;
    }
    if (LLVMIsALoadInst(v)) {
        /* a buffer pointer: args[k] */
        LLVMValueRef a = LLVMGetOperand(v, 0);
        long k = 0;
        if (LLVMIsAGetElementPtrInst(a) && LLVMGetNumOperands(a) == 2 && LLVMIsAConstantInt(LLVMGetOperand(a, 1))) {
            k = (long)LLVMConstIntGetSExtValue(LLVMGetOperand(a, 1));
            a = LLVMGetOperand(a, 0);
        }
        if (a == LLVMGetParam(p->f, 0)) {
            o.kind = OBJ_BUFFER;
            o.index = k;
        }
    }
    return o;
}

typedef struct {
    LLVMValueRef inst;
    mem_obj obj;
    int writes;
    int rank, pos; /* block rank, index in block */
    long one;      /* >= 0: only the thread of this index in the group runs it (see one_thread) */
} mem_op;

/* The memory an instruction touches (0: none or private). */
static int mem_access(pass *p, LLVMValueRef in, mem_op *ops, int max) {
    int n = 0;
    LLVMOpcode op = LLVMGetInstructionOpcode(in);
    if (op == LLVMLoad || op == LLVMStore || op == LLVMAtomicRMW || op == LLVMAtomicCmpXchg) {
        LLVMValueRef ptr = LLVMGetOperand(in, op == LLVMStore ? 1 : 0);
        mem_op m = {in, underlying(p, ptr), op != LLVMLoad, 0, 0};
        if (m.obj.kind != OBJ_PRIVATE && m.obj.kind != OBJ_RUNTIME && n < max) ops[n++] = m;
        return n;
    }
    if (op == LLVMCall) {
        LLVMValueRef c = LLVMGetCalledValue(in);
        if (is_sync_fn(p, c) || c == p->fn_tg_alloc) return 0;
        if (LLVMIsAFunction(c)) {
            const char *nm = mkk_ir_name(c);
            unsigned id = LLVMGetIntrinsicID(c);
            if (id) {
                if (strncmp(nm, "llvm.memcpy", 11) == 0 || strncmp(nm, "llvm.memmove", 12) == 0) {
                    mem_op d = {in, underlying(p, LLVMGetOperand(in, 0)), 1, 0, 0};
                    mem_op s = {in, underlying(p, LLVMGetOperand(in, 1)), 0, 0, 0};
                    if (d.obj.kind != OBJ_PRIVATE && d.obj.kind != OBJ_RUNTIME && n < max) ops[n++] = d;
                    if (s.obj.kind != OBJ_PRIVATE && s.obj.kind != OBJ_RUNTIME && n < max) ops[n++] = s;
                    return n;
                }
                if (strncmp(nm, "llvm.memset", 11) == 0) {
                    mem_op d = {in, underlying(p, LLVMGetOperand(in, 0)), 1, 0, 0};
                    if (d.obj.kind != OBJ_PRIVATE && d.obj.kind != OBJ_RUNTIME && n < max) ops[n++] = d;
                    return n;
                }
                return 0; /* lifetime markers, math, assume, ... */
            }
            /* external functions: libm and friends read and write nothing we
             * share; anything else is treated as writing anywhere */
            unsigned rn = LLVMGetEnumAttributeKindForName("readnone", 8);
            if (LLVMGetEnumAttributeAtIndex(c, LLVMAttributeFunctionIndex, rn) ||
                LLVMGetCallSiteEnumAttribute(in, LLVMAttributeFunctionIndex, rn))
                return 0;
            static const char *const pure[] = {"exp", "log", "sin", "cos", "tan", "pow", "sqrt", "fmod", "atan",
                                               "asin", "acos", "sinh", "cosh", "tanh", "erf", "expm1", "log1p",
                                               "cbrt", "hypot", "round", "trunc", "floor", "ceil", "rint",
                                               "ldexp", "frexp", "remainder", "copysign", "fma", "exp2", "log2",
                                               "log10", "atan2", "lgamma", "tgamma", "nextafter", "fmin", "fmax"};
            size_t len = strlen(nm);
            for (size_t i = 0; i < sizeof pure / sizeof *pure; i++) {
                size_t pl = strlen(pure[i]);
                if (strncmp(nm, pure[i], pl) == 0 && (len == pl || (len == pl + 1 && nm[pl] == 'f'))) return 0;
            }
        }
        mem_op u = {in, {OBJ_UNKNOWN, NULL, -1}, 1, 0, 0};
        if (n < max) ops[n++] = u;
    }
    return n;
}

static int may_conflict(const mem_op *a, const mem_op *b) {
    if (!a->writes && !b->writes) return 0;
    if (a->inst == b->inst) return 0; /* one instruction: the lanes act at once */
    if (a->obj.kind == OBJ_UNKNOWN || b->obj.kind == OBJ_UNKNOWN) return 1;
    if (a->obj.kind != b->obj.kind) return 0;
    if (a->obj.kind == OBJ_GLOBAL) return a->obj.base == b->obj.base;
    if (a->obj.kind == OBJ_BUFFER) return a->obj.index == b->obj.index;
    return 0;
}

static int ends_in_sync(pass *p, LLVMBasicBlockRef bb) {
    LLVMValueRef t = LLVMGetBasicBlockTerminator(bb);
    LLVMValueRef prev = t ? LLVMGetPreviousInstruction(t) : NULL;
    return prev && sync_kind(p, prev);
}

/* PoCL's "implicit loop barriers": a step at the header of every innermost
 * loop without a site, so that each iteration becomes a region run by a
 * work-item loop across the threads, whose memory accesses are then
 * consecutive (a GPU's coalesced loads) and vectorise. Adding a site never
 * changes results here: lockstep is the model. Returns -1 on failure. */
static LLVMValueRef const_i32(pass *p, long v);
static LLVMValueRef const_i64(pass *p, long long v);
static LLVMValueRef gep_bytes(pass *p, LLVMValueRef base, LLVMValueRef off);

/* The natural loops of the CFG: per back edge u -> h, hdr[l] = h,
 * latch[l] = u and blocks[l * n + x] = 1 for the blocks of its loop (those
 * that reach u without passing h). */
typedef struct {
    int n, *hdr, *latch;
    char *blocks;
} loops;

static void loops_free(loops *L) {
    free(L->hdr);
    free(L->latch);
    free(L->blocks);
}

/* Builds the CFG and fills L; returns how many loops, or -1. */
static int natural_loops(pass *p, loops *L) {
    memset(L, 0, sizeof *L);
    if (cfg_build(p) < 0) return -1;
    int n = p->nblocks, nloops = 0, sp = 0;
    int *hdr = L->hdr = malloc(sizeof(int) * (size_t)n * 2), *latch = L->latch = malloc(sizeof(int) * (size_t)n * 2);
    char *blocks = L->blocks = calloc((size_t)n * (size_t)n * 2, 1);
    L->n = n;
    int *stack = malloc(sizeof(int) * (size_t)n), *pos = calloc((size_t)n, sizeof(int)),
        *ws = malloc(sizeof(int) * (size_t)n);
    char *state = calloc((size_t)n, 1);
    if (!stack || !pos || !state || !ws || !hdr || !latch || !blocks) {
        nloops = mkk_ir_fail(p, "out of memory");
        goto out;
    }
    /* back edges u -> h (h on the DFS stack) */
    stack[sp++] = 0;
    state[0] = 1;
    while (sp) {
        int u = stack[sp - 1];
        if (pos[u] >= p->nsucc[u]) {
            state[u] = 2;
            sp--;
            continue;
        }
        int h = p->succ[u][pos[u]++];
        if (state[h] == 0) {
            state[h] = 1;
            stack[sp++] = h;
            continue;
        }
        if (state[h] != 1 || nloops >= 2 * n) continue;
        char *in = blocks + (size_t)nloops * n;
        latch[nloops] = u;
        hdr[nloops++] = h;
        in[h] = 1;
        int top = 0;
        if (!in[u]) {
            in[u] = 1;
            ws[top++] = u;
        }
        while (top) {
            int x = ws[--top];
            for (int y = 0; y < n; y++)
                for (int k = 0; k < p->nsucc[y]; k++)
                    if (p->succ[y][k] == x && !in[y]) {
                        in[y] = 1;
                        ws[top++] = y;
                    }
        }
    }
out:
    free(stack);
    free(pos);
    free(state);
    free(ws);
    return nloops;
}

/* A step at the latch of every loop holding a SIMD-group function, a
 * simdgroup_barrier or a step (issue #25). The release order runs the site
 * of lowest rank first, and a loop's header ranks below its body: without
 * this step, lanes that took the back edge ran the next iteration's first
 * site while lanes of the same SIMD-group still waited at a later site of
 * the current one (a lane-0 branch, say), so that site saw a partial
 * SIMD-group and memory effects of two iterations interleaved. The latch
 * ranks above every block of its loop, so lanes wait there until the whole
 * iteration is done: the loop's lanes start each iteration together, as a
 * GPU's do. (Loops whose only sites are threadgroup barriers need none:
 * every thread waits at each of those anyway.) */
static int add_latch_steps(pass *p) {
    loops L;
    int nloops = natural_loops(p, &L), n = L.n, rc = 0, nat = 0, *latch = L.latch;
    char *blocks = L.blocks;
    LLVMBasicBlockRef *at = malloc(sizeof *at * (size_t)n * 2 + 1);
    if (nloops < 0 || !at) {
        rc = nloops < 0 ? -1 : mkk_ir_fail(p, "out of memory");
        goto out;
    }
    for (int l = 0; l < nloops; l++) {
        const char *in = blocks + (size_t)l * n;
        int need = 0;
        for (int x = 0; x < n && !need; x++) {
            if (!in[x] || !ends_in_sync(p, p->blocks[x])) continue;
            LLVMValueRef call = LLVMGetPreviousInstruction(LLVMGetBasicBlockTerminator(p->blocks[x]));
            need = sync_kind(p, call) != MKPY_CBS_BARRIER;
        }
        if (need && !ends_in_sync(p, p->blocks[latch[l]])) at[nat++] = p->blocks[latch[l]];
    }
    /* after the analysis: each split changes the CFG */
    for (int i = 0; i < nat; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= at[j] == at[i];
        if (dup) continue;
        LLVMPositionBuilderBefore(p->b, LLVMGetBasicBlockTerminator(at[i]));
        LLVMValueRef call = LLVMBuildCall2(p->b, LLVMGlobalGetValueType(p->fn_step), p->fn_step, NULL, 0, "");
        split_after(p, call);
    }
out:
    loops_free(&L);
    free(at);
    return rc;
}

static int add_loop_steps(pass *p) {
    loops L;
    int nloops = natural_loops(p, &L), n = L.n, rc = 0, *hdr = L.hdr;
    char *blocks = L.blocks;
    if (nloops < 0) {
        rc = -1;
        goto out;
    }
    for (int l = 0; l < nloops; l++) {
        const char *in = blocks + (size_t)l * n;
        int ok = 1;
        for (int m = 0; m < nloops && ok; m++) /* innermost: no other header inside */
            if (hdr[m] != hdr[l] && in[hdr[m]]) ok = 0;
        for (int x = 0; x < n && ok; x++) /* no site inside */
            if (in[x] && ends_in_sync(p, p->blocks[x])) ok = 0;
        for (int m = 0; m < l && ok; m++) /* one step per header */
            if (hdr[m] == hdr[l]) ok = 0;
        /* the user's loops only: not those of the runtime header (the
         * lane loops of a SIMD-group reduction, say) */
        int user = 0;
        for (int x = 0; x < n && ok && !user; x++)
            if (in[x])
                for (LLVMValueRef q = LLVMGetFirstInstruction(p->blocks[x]); q && !user; q = LLVMGetNextInstruction(q)) {
                    unsigned len = 0;
                    const char *file = LLVMGetDebugLocFilename(q, &len);
                    user = file && len >= 8 && strncmp(file, "<kernel ", 8) == 0;
                }
        if (!user) ok = 0;
        if (!ok) continue;
        LLVMValueRef at = LLVMGetFirstInstruction(p->blocks[hdr[l]]);
        while (at && LLVMIsAPHINode(at)) at = LLVMGetNextInstruction(at);
        if (!at) continue;
        LLVMPositionBuilderBefore(p->b, at);
        LLVMValueRef call =
            LLVMBuildCall2(p->b, LLVMGlobalGetValueType(p->fn_loop_step), p->fn_loop_step, NULL, 0, "");
        split_after(p, call);
    }
out:
    loops_free(&L);
    return rc;
}

/* Is inst the first instruction of its block, every predecessor of which
 * ends in a site? */
static int behind_site(pass *p, LLVMValueRef inst) {
    LLVMValueRef prev = LLVMGetPreviousInstruction(inst);
    if (prev && !LLVMIsAPHINode(prev)) return 0;
    LLVMBasicBlockRef bb = LLVMGetInstructionParent(inst);
    int i = block_index(p, bb), preds = 0;
    for (int x = 0; x < p->nblocks; x++)
        for (int s = 0; s < p->nsucc[x]; s++)
            if (p->succ[x][s] == i) {
                if (!ends_in_sync(p, p->blocks[x])) return 0;
                preds++;
            }
    return preds > 0;
}

static int cmp_op(const void *x, const void *y) {
    const mem_op *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* The thread's index in its group, when v is it (through zero and sign
 * extensions): F's `index`, or its x position when the group is flat in y
 * and z (mkpy_cbs_flat). */
/* The value of an integer constant jit.c writes into the program
 * (mkpy_cbs_flat, mkpy_cbs_loop_steps, mkpy_cbs_compact), 0 when absent. */
static unsigned long long program_const(pass *p, const char *name) {
    LLVMValueRef g = LLVMGetNamedGlobal(p->m, name);
    LLVMValueRef init = g ? LLVMGetInitializer(g) : NULL;
    return init && LLVMIsAConstantInt(init) ? LLVMConstIntGetZExtValue(init) : 0;
}

static int is_thread_index(pass *p, LLVMValueRef v) {
    while (LLVMIsAZExtInst(v) || LLVMIsASExtInst(v)) v = LLVMGetOperand(v, 0);
    if (v == LLVMGetParam(p->f, 3)) return 1;
    if (v != LLVMGetParam(p->f, 6)) return 0;
    return (program_const(p, "mkpy_cbs_flat") & 3) == 3;
}

/* one[b] = c >= 0 where block b runs only in the thread of index c: b is
 * dominated by the taken edge of a branch on `index == c` (`if (lid == 0)`),
 * -1 elsewhere. Two memory operations that only that thread runs cannot
 * conflict across threads (one thread keeps its program order), so the
 * statistics a thread-0 section computes between barriers need no step per
 * access. */
static void one_thread(pass *p, long *one, char *seen, int *stack) {
    int n = p->nblocks;
    for (int b = 0; b < n; b++) one[b] = -1;
    for (int d = 0; d < n; d++) {
        LLVMValueRef t = LLVMGetBasicBlockTerminator(p->blocks[d]);
        if (!t || !LLVMIsABranchInst(t) || !LLVMIsConditional(t)) continue;
        LLVMValueRef c = LLVMGetCondition(t);
        if (!LLVMIsAICmpInst(c)) continue;
        LLVMIntPredicate pr = LLVMGetICmpPredicate(c);
        if (pr != LLVMIntEQ && pr != LLVMIntNE) continue;
        LLVMValueRef a = LLVMGetOperand(c, 0), k = LLVMGetOperand(c, 1);
        if (LLVMIsAConstantInt(a)) {
            LLVMValueRef x = a;
            a = k;
            k = x;
        }
        if (!LLVMIsAConstantInt(k) || !is_thread_index(p, a)) continue;
        long long kv = LLVMConstIntGetSExtValue(k);
        if (kv < 0 || kv >= MKPY_CBS_MAX_THREADS) continue;
        int taken = block_index(p, LLVMGetSuccessor(t, pr == LLVMIntEQ ? 0 : 1));
        if (taken <= 0 || taken == block_index(p, LLVMGetSuccessor(t, pr == LLVMIntEQ ? 1 : 0))) continue;
        int preds = 0; /* the branch must be its only way in */
        for (int x = 0; x < n; x++)
            for (int q = 0; q < p->nsucc[x]; q++) preds += p->succ[x][q] == taken;
        if (preds != 1) continue;
        /* the blocks that `taken` dominates: those the entry cannot reach without it */
        memset(seen, 0, (size_t)n);
        int sp = 0;
        stack[sp++] = 0;
        seen[0] = 1;
        seen[taken] = 1;
        while (sp) {
            int x = stack[--sp];
            for (int q = 0; q < p->nsucc[x]; q++)
                if (!seen[p->succ[x][q]]) {
                    seen[p->succ[x][q]] = 1;
                    stack[sp++] = p->succ[x][q];
                }
        }
        one[taken] = kv;
        for (int b = 0; b < n; b++)
            if (!seen[b] && one[b] < 0) one[b] = kv;
    }
}

/* One round of step insertion: finds the first conflict in some region and
 * puts a step site between the two operations. Returns 1 if it inserted
 * one, 0 if every region is free of conflicts, -1 on error. */
static int insert_one_step(pass *p) {
    if (cfg_build(p) < 0) return -1;
    int n = p->nblocks;
    char *seen = malloc((size_t)n);
    int *stack = malloc(sizeof(int) * (size_t)n);
    int cap = 256, nops = 0;
    mem_op *ops = malloc(sizeof *ops * (size_t)cap);
    long *one = malloc(sizeof *one * (size_t)n);
    if (!seen || !stack || !ops || !one) {
        free(seen);
        free(stack);
        free(ops);
        free(one);
        return mkk_ir_fail(p, "out of memory");
    }
    one_thread(p, one, seen, stack);
    int result = 0;
    /* region starts: the entry (block 0) and the block after each site */
    for (int start = 0; start < n && !result; start++) {
        if (start != 0) {
            /* the successor of a block ending in a site */
            int is_start = 0;
            for (int x = 0; x < n && !is_start; x++)
                if (ends_in_sync(p, p->blocks[x]))
                    for (int s = 0; s < p->nsucc[x]; s++)
                        if (p->succ[x][s] == start) is_start = 1;
            if (!is_start) continue;
        }
        memset(seen, 0, (size_t)n);
        int sp = 0;
        stack[sp++] = start;
        seen[start] = 1;
        nops = 0;
        while (sp) {
            int x = stack[--sp];
            int pos = 0;
            for (LLVMValueRef in = LLVMGetFirstInstruction(p->blocks[x]); in; in = LLVMGetNextInstruction(in), pos++) {
                mem_op tmp[2];
                int k = mem_access(p, in, tmp, 2);
                for (int i = 0; i < k; i++) {
                    if (nops == cap) {
                        cap *= 2;
                        mem_op *g = realloc(ops, sizeof *ops * (size_t)cap);
                        if (!g) {
                            result = mkk_ir_fail(p, "out of memory");
                            goto done;
                        }
                        ops = g;
                    }
                    tmp[i].rank = p->rank[x];
                    tmp[i].pos = pos;
                    tmp[i].one = one[x];
                    ops[nops++] = tmp[i];
                }
            }
            if (ends_in_sync(p, p->blocks[x])) continue;
            for (int s = 0; s < p->nsucc[x]; s++) {
                int y = p->succ[x][s];
                if (!seen[y]) {
                    seen[y] = 1;
                    stack[sp++] = y;
                }
            }
        }
        qsort(ops, (size_t)nops, sizeof *ops, cmp_op);
        for (int j = 1; j < nops && !result; j++)
            for (int i = 0; i < j; i++) {
                if (!may_conflict(&ops[i], &ops[j])) continue;
                if (ops[i].one >= 0 && ops[i].one == ops[j].one) continue; /* one thread runs both */
                /* a step before the later one, unless a site precedes it
                 * on every path already (then the pair meets around a
                 * loop: the step goes before the earlier one) */
                LLVMValueRef at = ops[j].inst;
                if (getenv("MKPY_CBS_TRACE")) {
                    char *a = LLVMPrintValueToString(ops[i].inst), *b = LLVMPrintValueToString(ops[j].inst);
                    fprintf(stderr, "cbs: step between\n  %s\n  %s\n", a, b);
                    LLVMDisposeMessage(a);
                    LLVMDisposeMessage(b);
                }
                if (behind_site(p, at)) at = ops[i].inst;
                if (behind_site(p, at)) continue;
                LLVMPositionBuilderBefore(p->b, at);
                LLVMValueRef call = LLVMBuildCall2(p->b, LLVMGlobalGetValueType(p->fn_step), p->fn_step, NULL, 0, "");
                split_after(p, call);
                result = 1;
                break;
            }
    }
done:
    free(seen);
    free(stack);
    free(ops);
    free(one);
    return result;
}

/* ------------------------------------------------------------ main pass */

typedef struct {
    LLVMValueRef call;
    int kind;
    LLVMBasicBlockRef head, resume; /* the block ending in the call; the resume block */
    int line, col, order;
    LLVMValueRef file;
    unsigned dep_off, dep_stride, dep_size; /* an exchange's value in the frame (dep_stride 0: the deposit) */
} site;

static LLVMValueRef const_i32(pass *p, long v) { return LLVMConstInt(p->i32, (unsigned long long)v, 1); }
static LLVMValueRef const_i64(pass *p, long long v) { return LLVMConstInt(p->i64, (unsigned long long)v, 1); }

static LLVMValueRef gep_bytes(pass *p, LLVMValueRef base, LLVMValueRef off) {
    return LLVMBuildGEP2(p->b, p->i8, base, &off, 1, "");
}

/* ctx->field (a pointer), built at the builder's position */
static LLVMValueRef ctx_field(pass *p, int index) {
    LLVMValueRef ctx = LLVMGetParam(p->f, 5);
    LLVMValueRef a = gep_bytes(p, ctx, const_i64(p, index * 8));
    return LLVMBuildLoad2(p->b, p->ptr, a, "");
}

/* v with every use of global g (directly or inside a constant GEP) in F's
 * instruction `user` replaced by base: constant expressions are rebuilt as
 * instructions before the user. */
static LLVMValueRef rebase(pass *p, LLVMValueRef v, LLVMValueRef g, LLVMValueRef base, LLVMValueRef at) {
    if (v == g) return base;
    if (!LLVMIsAConstantExpr(v) || LLVMGetConstOpcode(v) != LLVMGetElementPtr) return v;
    LLVMValueRef ptr = rebase(p, LLVMGetOperand(v, 0), g, base, at);
    if (ptr == LLVMGetOperand(v, 0)) return v;
    int n = LLVMGetNumOperands(v);
    LLVMValueRef idx[16];
    if (n - 1 > 16) return v;
    for (int i = 1; i < n; i++) idx[i - 1] = LLVMGetOperand(v, (unsigned)i);
    LLVMPositionBuilderBefore(p->b, at);
    LLVMTypeRef t = LLVMGetGEPSourceElementType(v);
    return LLVMIsInBounds(v) ? LLVMBuildInBoundsGEP2(p->b, t, ptr, idx, (unsigned)(n - 1), "")
                             : LLVMBuildGEP2(p->b, t, ptr, idx, (unsigned)(n - 1), "");
}

/* Threadgroup variables (the `static thread_local` globals of the C++) move
 * to the worker's threadgroup memory, ctx->tg: one base pointer for the
 * region instead of a __tls_get_addr per access (a sixth of SGEMM's time),
 * and LLVM then knows them apart from the buffers. Returns their size, or
 * (unsigned long long)-1 on failure. */
static unsigned long long privatize_threadgroup(pass *p, LLVMValueRef tg_base, LLVMValueRef before) {
    unsigned long long off = 0;
    for (LLVMValueRef g = LLVMGetFirstGlobal(p->m); g; g = LLVMGetNextGlobal(g)) {
        if (!LLVMIsThreadLocal(g)) continue;
        /* F's uses of g: instructions using it directly or through constant GEPs */
        int used = 0;
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb && !used; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in && !used; in = LLVMGetNextInstruction(in)) {
                int n = LLVMGetNumOperands(in);
                for (int i = 0; i < n && !used; i++) {
                    LLVMValueRef o = LLVMGetOperand(in, (unsigned)i);
                    used = o == g || (LLVMIsAConstantExpr(o) && rebase(p, o, g, g, in) != o);
                }
            }
        if (!used) continue;
        LLVMTypeRef t = LLVMGlobalGetValueType(g);
        unsigned align = LLVMGetAlignment(g);
        if (align < LLVMABIAlignmentOfType(p->td, t)) align = LLVMABIAlignmentOfType(p->td, t);
        if (align < 16) align = 16;
        off = (off + align - 1) / align * align;
        LLVMPositionBuilderBefore(p->b, before);
        LLVMValueRef base = gep_bytes(p, tg_base, const_i64(p, (long long)off));
        off += LLVMABISizeOfType(p->td, t);
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
                if (in == base) continue;
                int n = LLVMGetNumOperands(in);
                for (int i = 0; i < n; i++) {
                    LLVMValueRef o = LLVMGetOperand(in, (unsigned)i);
                    LLVMValueRef r = LLVMIsAPHINode(in)
                                         ? rebase(p, o, g, base, LLVMGetBasicBlockTerminator(LLVMGetIncomingBlock(in, (unsigned)i)))
                                         : rebase(p, o, g, base, in);
                    if (r != o) LLVMSetOperand(in, (unsigned)i, r);
                }
            }
    }
    return off;
}

static int collect_sites(pass *p, site **out, int *nout) {
    int n = 0, cap = 64;
    site *s = malloc(sizeof *s * (size_t)cap);
    if (!s) return mkk_ir_fail(p, "out of memory");
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            int k = sync_kind(p, in);
            if (!k) continue;
            if (n == cap) {
                cap *= 2;
                site *g = realloc(s, sizeof *s * (size_t)cap);
                if (!g) {
                    free(s);
                    return mkk_ir_fail(p, "out of memory");
                }
                s = g;
            }
            site *t = &s[n++];
            memset(t, 0, sizeof *t);
            t->call = in;
            t->kind = k;
            if (k != MKPY_CBS_STEP) {
                int nargs = LLVMGetNumArgOperands(in);
                /* (file, line, col) are the last three arguments */
                t->file = LLVMGetOperand(in, (unsigned)nargs - 3);
                LLVMValueRef l = LLVMGetOperand(in, (unsigned)nargs - 2), c = LLVMGetOperand(in, (unsigned)nargs - 1);
                t->line = LLVMIsAConstantInt(l) ? (int)LLVMConstIntGetSExtValue(l) : 0;
                t->col = LLVMIsAConstantInt(c) ? (int)LLVMConstIntGetSExtValue(c) : 0;
                if (!LLVMIsAConstant(t->file)) t->file = NULL;
            }
        }
    if (n >= MAX_SITES) {
        free(s);
        return mkk_ir_fail(p, "too many resume points");
    }
    *out = s;
    *nout = n;
    return 0;
}

/* Is block `use` reachable from the end of block `def` along a path that
 * passes a site, without passing `def` again (which would redefine)? */
static int crosses_site(pass *p, int def, int use, char *seen, int *stack) {
    int n = p->nblocks;
    memset(seen, 0, (size_t)n * 2);
    int sp = 0;
    stack[sp++] = def * 2 + ends_in_sync(p, p->blocks[def]);
    while (sp) {
        int st = stack[--sp], x = st / 2, c = st % 2;
        if (x != def) c = c || ends_in_sync(p, p->blocks[x]);
        for (int s = 0; s < p->nsucc[x]; s++) {
            int y = p->succ[x][s];
            if (y == def) continue;
            if (y == use && c) return 1;
            if (!seen[y * 2 + c]) {
                seen[y * 2 + c] = 1;
                stack[sp++] = y * 2 + c;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------ the frame */

static LLVMValueRef const_i64(pass *p, long long v);
static LLVMValueRef gep_bytes(pass *p, LLVMValueRef base, LLVMValueRef off);
static unsigned long long align_up(unsigned long long x, unsigned long long a) { return (x + a - 1) / a * a; }

/* The address of v's slot in the frame (thread i's element of v's array:
 * frame + offset * MAX_THREADS + i * size), made on first use. For a value,
 * a store after its definition keeps the slot up to date; an alloca's slot
 * replaces it. NULL (with p->why) on failure. */
static LLVMValueRef slot_for(pass *p, LLVMValueRef v) {
    for (int i = 0; i < p->nslot_addrs; i++)
        if (p->slot_vals[i] == v) return p->slot_addrs[i];
    int is_alloca = LLVMIsAAllocaInst(v) != NULL;
    LLVMTypeRef type = is_alloca ? LLVMGetAllocatedType(v) : LLVMTypeOf(v);
    unsigned long long size = LLVMABISizeOfType(p->td, type);
    if (is_alloca) size *= LLVMConstIntGetZExtValue(LLVMGetOperand(v, 0));
    unsigned align = LLVMABIAlignmentOfType(p->td, type);
    if (is_alloca && LLVMGetAlignment(v) > align) align = LLVMGetAlignment(v);
    if (align < 1) align = 1;
    if (align > 64) {
        mkk_ir_fail(p, "a variable aligned to more than 64 bytes");
        return NULL;
    }
    size = align_up(size ? size : 1, align);
    p->frame = align_up(p->frame, align > 16 ? align : 16);
    unsigned long long offset = p->frame;
    p->frame += size;
    if (p->nslot_addrs == p->slot_addr_cap) {
        p->slot_addr_cap = p->slot_addr_cap ? 2 * p->slot_addr_cap : 64;
        LLVMValueRef *a = realloc(p->slot_addrs, sizeof *a * (size_t)p->slot_addr_cap);
        if (a) p->slot_addrs = a;
        LLVMValueRef *b = realloc(p->slot_vals, sizeof *b * (size_t)p->slot_addr_cap);
        if (b) p->slot_vals = b;
        char *m = realloc(p->slot_memory, (size_t)p->slot_addr_cap);
        if (m) p->slot_memory = m;
        unsigned long long *o = realloc(p->slot_offs, sizeof *o * (size_t)p->slot_addr_cap);
        if (o) p->slot_offs = o;
        unsigned long long *z = realloc(p->slot_sizes, sizeof *z * (size_t)p->slot_addr_cap);
        if (z) p->slot_sizes = z;
        if (!a || !b || !m || !o || !z) {
            mkk_ir_fail(p, "out of memory");
            return NULL;
        }
    }
    LLVMPositionBuilderBefore(p->b, p->e_br);
    LLVMValueRef off = LLVMBuildAdd(p->b, const_i64(p, (long long)(offset * MKPY_CBS_MAX_THREADS)),
                                    LLVMBuildMul(p->b, p->index64, const_i64(p, (long long)size), ""), "");
    LLVMValueRef addr = gep_bytes(p, p->frame_base, off);
    p->slot_vals[p->nslot_addrs] = v;
    p->slot_memory[p->nslot_addrs] = (char)is_alloca;
    p->slot_offs[p->nslot_addrs] = offset;
    p->slot_sizes[p->nslot_addrs] = size;
    p->slot_addrs[p->nslot_addrs++] = addr;
    if (!is_alloca) {
        LLVMValueRef after = LLVMGetNextInstruction(v);
        while (after && LLVMIsAPHINode(after)) after = LLVMGetNextInstruction(after);
        LLVMPositionBuilderBefore(p->b, after);
        LLVMSetAlignment(LLVMBuildStore(p->b, v, addr), align);
    }
    return addr;
}

static void forget_slot_value(pass *p, LLVMValueRef v) {
    for (int i = 0; i < p->nslot_addrs; i++)
        if (p->slot_vals[i] == v) p->slot_vals[i] = NULL;
}

/* A load of a value's slot. Not a load of an alloca moved to the frame:
 * that memory changes between sites, and is dead after its lifetime ends,
 * so it cannot be computed again at a later use. */
static int is_slot_load(pass *p, LLVMValueRef v) {
    if (!LLVMIsALoadInst(v)) return 0;
    LLVMValueRef a = LLVMGetOperand(v, 0);
    for (int i = 0; i < p->nslot_addrs; i++)
        if (a == p->slot_addrs[i]) return !p->slot_memory[i];
    return 0;
}

/* Is `user` the store that keeps v's slot up to date? (Not any store of v
 * into some slot: v may also be stored into an alloca that moved to the
 * frame, a use like any other.) */
static int is_slot_store(pass *p, LLVMValueRef user, LLVMValueRef v) {
    if (!LLVMIsAStoreInst(user) || LLVMGetOperand(user, 0) != v) return 0;
    LLVMValueRef a = LLVMGetOperand(user, 1);
    for (int i = 0; i < p->nslot_addrs; i++)
        if (p->slot_vals[i] == v) return a == p->slot_addrs[i];
    return 0;
}

/* Pure and cheap: computed again at a use rather than kept. Loads of the
 * read-only args array and launch count, as do loads of frame slots (a
 * slot holds its value's latest definition: the value itself wherever that
 * definition dominates). */
static int is_cheap(pass *p, LLVMValueRef v) {
    switch (LLVMGetInstructionOpcode(v)) {
    case LLVMAdd: case LLVMSub: case LLVMMul: case LLVMShl: case LLVMLShr: case LLVMAShr: case LLVMAnd:
    case LLVMOr: case LLVMXor: case LLVMTrunc: case LLVMZExt: case LLVMSExt: case LLVMBitCast:
    case LLVMPtrToInt: case LLVMIntToPtr: case LLVMGetElementPtr: case LLVMICmp: case LLVMSelect:
    case LLVMFreeze: case LLVMUIToFP: case LLVMSIToFP: case LLVMFPExt: case LLVMFPTrunc:
        return LLVMGetNumOperands(v) <= 8;
    case LLVMLoad: {
        if (is_slot_load(p, v)) return 1;
        if (LLVMGetVolatile(v)) return 0;
        LLVMValueRef base = LLVMGetOperand(v, 0);
        while (LLVMIsAGetElementPtrInst(base)) base = LLVMGetOperand(base, 0);
        return base == LLVMGetParam(p->f, 0) || base == LLVMGetParam(p->f, 1) || base == LLVMGetParam(p->f, 2);
    }
    default:
        return 0;
    }
}

/* The same for every thread of the threadgroup: computed from constants,
 * the args array, the launch and the group index (params 0-2) only, by pure
 * instructions (divisions included: a division a thread reached had a
 * non-zero divisor, and so does every thread's). Such a value is computed
 * again at a use instead of being kept per thread, and O2 then hoists it out
 * of the work-item loops: a group's coordinates (g / grid width, ...) would
 * otherwise be a per-thread slot, and addresses built from it gathers. */
static int is_uniform(pass *p, LLVMValueRef v, int depth) {
    if (LLVMIsAConstant(v)) return 1;
    if (LLVMIsAArgument(v))
        return v == LLVMGetParam(p->f, 0) || v == LLVMGetParam(p->f, 1) || v == LLVMGetParam(p->f, 2);
    if (!LLVMIsAInstruction(v) || depth >= 10) return 0;
    switch (LLVMGetInstructionOpcode(v)) {
    case LLVMUDiv: case LLVMSDiv: case LLVMURem: case LLVMSRem:
        break;
    default:
        if (!is_cheap(p, v) || is_slot_load(p, v)) return 0;
    }
    int n = LLVMGetNumOperands(v);
    if (n > 8) return 0;
    for (int i = 0; i < n; i++)
        if (!is_uniform(p, LLVMGetOperand(v, (unsigned)i), depth + 1)) return 0;
    return 1;
}


/* ------------------------------------------ group-uniform slots
 * A value kept in a slot is the same for every thread of a dense run (every
 * thread of the group waiting at one site) when it is the counter of a loop
 * with a threadgroup barrier in it (Metal requires such a loop to run the
 * same iterations in every thread) that starts and steps by uniform values,
 * like `for (t = 0; t < N; t += TS)` around a tile's barriers or
 * `for (off = n / 2; off > 0; off >>= 1)` in a tree reduction. Such a slot
 * read in a dense run comes from thread 0's copy, loaded once per run into
 * the run function (see mkpy_kernel_cbs_run): addresses built from it are
 * then affine in the work-item loops, which vectorise (a per-thread load
 * made every tile row a gather). */

static int dominators(pass *p) {
    int n = p->nblocks;
    if (p->dom_n == n && p->dom) return 0;
    free(p->dom);
    p->dom = malloc((size_t)n * (size_t)n);
    int *npred = calloc((size_t)n, sizeof *npred), **pred = calloc((size_t)n, sizeof *pred);
    if (!p->dom || !npred || !pred) goto oom;
    for (int a = 0; a < n; a++)
        for (int k = 0; k < p->nsucc[a]; k++) npred[p->succ[a][k]]++;
    for (int b = 0; b < n; b++) {
        pred[b] = malloc(sizeof(int) * (size_t)(npred[b] ? npred[b] : 1));
        if (!pred[b]) goto oom;
        npred[b] = 0;
    }
    for (int a = 0; a < n; a++)
        for (int k = 0; k < p->nsucc[a]; k++) {
            int b = p->succ[a][k];
            pred[b][npred[b]++] = a;
        }
    /* dom[a * n + b]: a dominates b; block 0 is the entry */
    memset(p->dom, 1, (size_t)n * (size_t)n);
    for (int a = 0; a < n; a++) p->dom[a * n + 0] = a == 0;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int b = 1; b < n; b++) {
            for (int a = 0; a < n; a++) {
                if (a == b || !p->dom[a * n + b]) continue;
                int all = npred[b] > 0;
                for (int k = 0; k < npred[b] && all; k++) all = p->dom[a * n + pred[b][k]];
                if (!all) {
                    p->dom[a * n + b] = 0;
                    changed = 1;
                }
            }
        }
    }
    for (int b = 0; b < n; b++) free(pred[b]);
    free(pred);
    free(npred);
    p->dom_n = n;
    return 0;
oom:
    if (pred)
        for (int b = 0; b < n; b++) free(pred[b]);
    free(pred);
    free(npred);
    free(p->dom);
    p->dom = NULL;
    mkk_ir_fail(p, "out of memory");
    return -1;
}

/* Can control go from the end of block `from` to block `to`, not passing
 * block `avoid` (if >= 0)? With `sites`, only along site-free paths: `from`
 * ending in a site then reaches nothing, unless `from_site_ok` (a run that
 * resumes after that site). */
static int reach(pass *p, int from, int to, int avoid, int sites, int from_site_ok, char *seen, int *stack) {
    int n = p->nblocks, sp = 0;
    if (sites && !from_site_ok && ends_in_sync(p, p->blocks[from])) return 0;
    memset(seen, 0, (size_t)n);
    for (int k = 0; k < p->nsucc[from]; k++) stack[sp++] = p->succ[from][k];
    while (sp) {
        int x = stack[--sp];
        if (seen[x]) continue;
        seen[x] = 1;
        if (x == to) return 1;
        if (x == avoid || (sites && ends_in_sync(p, p->blocks[x]))) continue;
        for (int k = 0; k < p->nsucc[x]; k++)
            if (!seen[p->succ[x][k]]) stack[sp++] = p->succ[x][k];
    }
    return 0;
}

/* Does the loop of header h with latch l hold a threadgroup barrier? */
static int loop_has_barrier(pass *p, int h, int l, char *seen, int *stack) {
    int n = p->nblocks;
    char *in = calloc((size_t)n, 1);
    if (!in) return 0;
    /* blocks reachable from h without passing h, from which l is reachable without passing h */
    int sp = 0, found = 0;
    for (int k = 0; k < p->nsucc[h]; k++) stack[sp++] = p->succ[h][k];
    while (sp) {
        int x = stack[--sp];
        if (x == h || in[x]) continue;
        in[x] = 1;
        for (int k = 0; k < p->nsucc[x]; k++)
            if (!in[p->succ[x][k]]) stack[sp++] = p->succ[x][k];
    }
    for (int b = 0; b < n && !found; b++) {
        if (!in[b] && b != h) continue;
        LLVMValueRef t = LLVMGetBasicBlockTerminator(p->blocks[b]);
        LLVMValueRef prev = t ? LLVMGetPreviousInstruction(t) : NULL;
        if (!prev || sync_kind(p, prev) != MKPY_CBS_BARRIER) continue;
        found = b == l || reach(p, b, l, h, 0, 0, seen, stack);
    }
    free(in);
    return found;
}

/* The index of the args entry that pointer v is loaded from, or -1. */
static int args_entry(pass *p, LLVMValueRef v) {
    if (!LLVMIsALoadInst(v) || LLVMGetVolatile(v)) return -1;
    LLVMValueRef a = LLVMGetOperand(v, 0);
    if (a == LLVMGetParam(p->f, 0)) return 0;
    if (!LLVMIsAGetElementPtrInst(a) || LLVMGetOperand(a, 0) != LLVMGetParam(p->f, 0) || LLVMGetNumOperands(a) != 2)
        return -1;
    LLVMValueRef idx = LLVMGetOperand(a, 1);
    if (!LLVMIsAConstantInt(idx)) return -1;
    long long k = LLVMConstIntGetSExtValue(idx);
    unsigned long long esz = LLVMABISizeOfType(p->td, LLVMGetGEPSourceElementType(a));
    if (k < 0 || esz == 0 || (unsigned long long)k * esz % 8) return -1;
    return (int)((unsigned long long)k * esz / 8);
}

static int group_uniform(pass *p, LLVMValueRef v, LLVMValueRef *assume, int nassume, int depth,
                         char *seen, int *stack) {
    if (LLVMIsAConstant(v)) return 1;
    if (LLVMIsAArgument(v))
        return v == LLVMGetParam(p->f, 0) || v == LLVMGetParam(p->f, 1) || v == LLVMGetParam(p->f, 2);
    if (!LLVMIsAInstruction(v) || depth > 12) return 0;
    for (int i = 0; i < nassume; i++)
        if (assume[i] == v) return 1;
    for (int i = 0; i < p->nuni_loads; i++)
        if (p->uni_loads[i] == v) return group_uniform(p, p->uni_of[i], assume, nassume, depth + 1, seen, stack);
    if (is_uniform(p, v, 0)) return 1;
    if (is_slot_load(p, v)) {
        LLVMValueRef a = LLVMGetOperand(v, 0);
        for (int i = 0; i < p->nslot_addrs; i++)
            if (a == p->slot_addrs[i]) return group_uniform(p, p->slot_vals[i], assume, nassume, depth + 1, seen, stack);
        return 0;
    }
    if (LLVMIsAPHINode(v)) {
        if (nassume >= 8 || LLVMCountIncoming(v) != 2 || dominators(p) < 0) return 0;
        int n = p->nblocks, h = block_index(p, LLVMGetInstructionParent(v)), latch = -1, pre = -1;
        if (h < 0) return 0;
        for (unsigned q = 0; q < 2; q++) {
            int ib = block_index(p, LLVMGetIncomingBlock(v, q));
            if (ib < 0) return 0;
            if (p->dom[h * n + ib])
                latch = (int)q;
            else
                pre = (int)q;
        }
        if (latch < 0 || pre < 0) return 0;
        if (!loop_has_barrier(p, h, block_index(p, LLVMGetIncomingBlock(v, (unsigned)latch)), seen, stack)) return 0;
        assume[nassume] = v;
        return group_uniform(p, LLVMGetIncomingValue(v, (unsigned)pre), assume, nassume, depth + 1, seen, stack) &&
               group_uniform(p, LLVMGetIncomingValue(v, (unsigned)latch), assume, nassume + 1, depth + 1, seen, stack);
    }
    if (LLVMIsALoadInst(v)) {
        /* an input read at a uniform address (inputs are const in Metal) */
        if (LLVMGetVolatile(v) || LLVMGetOrdering(v) != LLVMAtomicOrderingNotAtomic) return 0;
        LLVMValueRef a = LLVMGetOperand(v, 0);
        while (LLVMIsAGetElementPtrInst(a)) {
            int nops = LLVMGetNumOperands(a);
            for (int i = 1; i < nops; i++)
                if (!group_uniform(p, LLVMGetOperand(a, (unsigned)i), assume, nassume, depth + 1, seen, stack)) return 0;
            a = LLVMGetOperand(a, 0);
        }
        int e = args_entry(p, a);
        return e >= 0 && e < p->readonly_args;
    }
    switch (LLVMGetInstructionOpcode(v)) {
    case LLVMUDiv: case LLVMSDiv: case LLVMURem: case LLVMSRem:
        break;
    case LLVMPHI:
        return 0;
    default:
        if (!is_cheap(p, v)) return 0;
    }
    int nops = LLVMGetNumOperands(v);
    for (int i = 0; i < nops; i++)
        if (!group_uniform(p, LLVMGetOperand(v, (unsigned)i), assume, nassume, depth + 1, seen, stack)) return 0;
    return 1;
}

/* The sites after which v's slot, read before `at`, may come from thread
 * 0's copy in a dense run: v is group-uniform; a thread resuming there has
 * v defined (v's block dominates the site) and cannot define it again before
 * `at` (no site-free path from the site through v's block to `at`); and `at`
 * is reached from the site without another. Sets ok[i] for site i; returns how many,
 * or -1. */
static int stable_sites(pass *p, LLVMValueRef v, LLVMValueRef at, char *ok, int uniform) {
    if (!LLVMIsAInstruction(v) || !p->nsite_heads) return 0;
    for (int i = 0; i < p->nslot_addrs; i++)
        if (p->slot_vals[i] == v && p->slot_memory[i]) return 0;
    if (dominators(p) < 0) return -1;
    int n = p->nblocks, db = block_index(p, LLVMGetInstructionParent(v)), ub = block_index(p, LLVMGetInstructionParent(at));
    if (db < 0 || ub < 0) return 0;
    size_t edges = (size_t)n + 8;
    for (int b = 0; b < n; b++) edges += (size_t)p->nsucc[b];
    char *seen = malloc((size_t)n);
    int *stack = malloc(sizeof(int) * edges);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        mkk_ir_fail(p, "out of memory");
        return -1;
    }
    LLVMValueRef assume[8];
    int count = 0;
    if (!uniform || group_uniform(p, v, assume, 0, 0, seen, stack))
        for (int i = 0; i < p->nsite_heads; i++) {
            int h = p->site_heads[i];
            /* v's block reached again after the site is fine when `at`
             * cannot follow it without another site: a barrier loop's
             * counter used in the latch, before the header redefines it */
            ok[i] = h >= 0 && p->dom[db * n + h] && reach(p, h, ub, -1, 1, 1, seen, stack) &&
                    !(reach(p, h, db, -1, 1, 1, seen, stack) &&
                      (db == ub || reach(p, db, ub, -1, 1, 0, seen, stack)));
            count += ok[i];
        }
    free(seen);
    free(stack);
    return count;
}

static int preload_sites(pass *p, LLVMValueRef v, LLVMValueRef at, char *ok) {
    return stable_sites(p, v, at, ok, 1);
}

/* x-affine slots. The counter of a grid- or row-stride loop, `for (i =
 * gid; i < n; i += gsz)`, is per thread, so the element load `x[i]` in its
 * loop-step region is a gather (AVX-512 and AVX2 have one, no faster than
 * scalar loads). In a dense run it is usually thread 0's value plus the
 * thread's index, which no analysis can promise (threads of a nested loop
 * may meet at the step after different iteration counts), so the run
 * function checks it: before a dense run at a site with such counters, it
 * compares every thread's slot with thread 0's plus the thread's index, and
 * if all hold runs a third nest (ctx->aff set) where F reads those slots as
 * thread 0's copy plus its index, which makes `x[i]` a contiguous vector
 * load. */
/* Does v depend on the thread's position (F's index or x, y, z) through
 * arithmetic and casts? */
static int on_position(pass *p, LLVMValueRef v, int depth) {
    if (v == LLVMGetParam(p->f, 3) || v == LLVMGetParam(p->f, 6) || v == LLVMGetParam(p->f, 7) ||
        v == LLVMGetParam(p->f, 8))
        return 1;
    if (!LLVMIsAInstruction(v) || depth > 8 || LLVMIsAPHINode(v) || LLVMIsALoadInst(v) || !is_cheap(p, v)) return 0;
    int n = LLVMGetNumOperands(v);
    for (int i = 0; i < n; i++)
        if (on_position(p, LLVMGetOperand(v, (unsigned)i), depth + 1)) return 1;
    return 0;
}

/* Candidates: integer phis of a loop-step block (a loop's counters) that
 * start from the thread's position. */
static int affine_candidate(pass *p, LLVMValueRef v) {
    if (!p->fn_loop_step || !LLVMIsAPHINode(v)) return 0;
    LLVMTypeRef t = LLVMTypeOf(v);
    if (LLVMGetTypeKind(t) != LLVMIntegerTypeKind) return 0;
    unsigned w = LLVMGetIntTypeWidth(t);
    if (w != 32 && w != 64) return 0;
    LLVMValueRef term = LLVMGetBasicBlockTerminator(LLVMGetInstructionParent(v));
    LLVMValueRef call = term ? LLVMGetPreviousInstruction(term) : NULL;
    if (!call || !LLVMIsACallInst(call) || LLVMGetCalledValue(call) != p->fn_loop_step) return 0;
    for (unsigned q = 0; q < LLVMCountIncoming(v); q++)
        if (on_position(p, LLVMGetIncomingValue(v, q), 0)) return 1;
    return 0;
}

/* Notes slot si as x-affine at the sites in ok. */
static int note_affine(pass *p, int si, const char *ok) {
    int a = -1;
    for (int i = 0; i < p->naff; i++)
        if (p->aff_slots[i] == si) a = i;
    if (a < 0) {
        if (p->naff == p->aff_cap) {
            int cap = p->aff_cap ? 2 * p->aff_cap : 8;
            int *u = realloc(p->aff_slots, sizeof *u * (size_t)cap);
            if (u) p->aff_slots = u;
            char *o = realloc(p->aff_ok, (size_t)cap * (size_t)(p->nsite_heads + 1));
            if (o) p->aff_ok = o;
            if (!u || !o) return mkk_ir_fail(p, "out of memory");
            p->aff_cap = cap;
        }
        a = p->naff++;
        p->aff_slots[a] = si;
        memset(p->aff_ok + (size_t)a * (size_t)(p->nsite_heads + 1), 0, (size_t)(p->nsite_heads + 1));
    }
    for (int i = 0; i < p->nsite_heads; i++) p->aff_ok[(size_t)a * (size_t)(p->nsite_heads + 1) + (size_t)i] |= ok[i];
    return 0;
}

static int note_uni_load(pass *p, LLVMValueRef load, LLVMValueRef v);

/* v's value before `at` (dominated by v's definition): constants, arguments
 * and E' values as they are; cheap and uniform instructions computed again
 * from their operands (up to a depth); anything else loaded from its frame
 * slot. */
static LLVMValueRef value_at(pass *p, LLVMValueRef v, LLVMValueRef at, int depth) {
    if (!LLVMIsAInstruction(v) || LLVMGetInstructionParent(v) == p->eb) return v;
    for (int i = 0; i < p->nuni_loads; i++)
        if (p->uni_loads[i] == v) v = p->uni_of[i];
    if (depth < 10 && (is_cheap(p, v) || is_uniform(p, v, depth))) {
        int n = LLVMGetNumOperands(v);
        LLVMValueRef ops[8];
        for (int i = 0; i < n; i++) {
            ops[i] = value_at(p, LLVMGetOperand(v, (unsigned)i), at, depth + 1);
            if (!ops[i]) return NULL;
        }
        LLVMValueRef c = LLVMInstructionClone(v);
        LLVMPositionBuilderBefore(p->b, at);
        LLVMInsertIntoBuilder(p->b, c);
        for (int i = 0; i < n; i++) LLVMSetOperand(c, (unsigned)i, ops[i]);
        return c;
    }
    LLVMValueRef addr = slot_for(p, v);
    if (!addr) return NULL;
    char *ok = calloc((size_t)p->nsite_heads + 1, 1);
    int pre = ok ? preload_sites(p, v, at, ok) : -1;
    if (pre < 0) {
        free(ok);
        if (!ok) mkk_ir_fail(p, "out of memory");
        return NULL;
    }
    LLVMPositionBuilderBefore(p->b, at);
    LLVMValueRef ld = LLVMBuildLoad2(p->b, LLVMTypeOf(v), addr, "");
    LLVMSetAlignment(ld, LLVMABIAlignmentOfType(p->td, LLVMTypeOf(v)));
    if (pre) {
        /* ctx->uni: thread 0's copy of the group-uniform slots in a dense
         * run (an alloca of the run function: SROA makes it SSA values, the
         * same for every thread of the work-item loops), NULL otherwise */
        int si = -1;
        for (int i = 0; i < p->nslot_addrs; i++)
            if (p->slot_vals[i] == v) si = i;
        int listed = 0;
        for (int i = 0; i < p->nuni; i++) listed |= p->uni_slots[i] == si;
        if (!listed) {
            if (p->nuni == p->uni_cap) {
                int cap = p->uni_cap ? 2 * p->uni_cap : 16;
                int *u = realloc(p->uni_slots, sizeof *u * (size_t)cap);
                if (!u) {
                    free(ok);
                    mkk_ir_fail(p, "out of memory");
                    return NULL;
                }
                p->uni_slots = u;
                p->uni_cap = cap;
            }
            p->uni_slots[p->nuni++] = si;
        }
        /* ctx->uni set (a dense run) and resumed at a site where the copy
         * holds (a constant in each work-item loop once F is inlined) */
        LLVMValueRef uni = ctx_field(p, 5), at_site = NULL;
        for (int i = 0; i < p->nsite_heads; i++) {
            if (!ok[i]) continue;
            LLVMValueRef is = LLVMBuildICmp(p->b, LLVMIntEQ, LLVMGetParam(p->f, 4), const_i32(p, i + 1), "");
            at_site = at_site ? LLVMBuildOr(p->b, at_site, is, "") : is;
        }
        LLVMValueRef have = LLVMBuildAnd(p->b, LLVMBuildICmp(p->b, LLVMIntNE, uni, LLVMConstPointerNull(p->ptr), ""),
                                         at_site, "");
        /* one load from the address chosen: ctx->uni is NULL outside dense runs */
        LLVMValueRef ua = LLVMBuildSelect(p->b, have, gep_bytes(p, uni, const_i64(p, (long long)p->slot_offs[si])),
                                          addr, "");
        LLVMValueRef ul = LLVMBuildLoad2(p->b, LLVMTypeOf(v), ua, "");
        LLVMSetAlignment(ul, LLVMABIAlignmentOfType(p->td, LLVMTypeOf(v)));
        LLVMInstructionEraseFromParent(ld);
        ld = ul;
        if (note_uni_load(p, ul, v) < 0) {
            free(ok);
            return NULL;
        }
    } else if (affine_candidate(p, v)) {
        int si = -1;
        for (int i = 0; i < p->nslot_addrs; i++)
            if (p->slot_vals[i] == v) si = i;
        memset(ok, 0, (size_t)p->nsite_heads + 1);
        int na = si >= 0 && !p->slot_memory[si] ? stable_sites(p, v, at, ok, 0) : 0;
        if (na < 0 || (na > 0 && note_affine(p, si, ok) < 0)) {
            free(ok);
            return NULL;
        }
        if (na > 0) {
            /* ctx->aff set (the affine nest) and resumed at a site where the
             * slot still holds the run's first value: thread 0's copy plus
             * the thread's index; one load from the address chosen */
            LLVMValueRef at_site = NULL;
            for (int i = 0; i < p->nsite_heads; i++) {
                if (!ok[i]) continue;
                LLVMValueRef is = LLVMBuildICmp(p->b, LLVMIntEQ, LLVMGetParam(p->f, 4), const_i32(p, i + 1), "");
                at_site = at_site ? LLVMBuildOr(p->b, at_site, is, "") : is;
            }
            LLVMValueRef use = LLVMBuildAnd(p->b, LLVMBuildIsNotNull(p->b, ctx_field(p, 6), ""), at_site, "");
            LLVMValueRef ua = LLVMBuildSelect(
                p->b, use, gep_bytes(p, ctx_field(p, 5), const_i64(p, (long long)p->slot_offs[si])), addr, "");
            LLVMTypeRef t = LLVMTypeOf(v);
            LLVMValueRef dl = LLVMBuildLoad2(p->b, t, ua, "");
            LLVMSetAlignment(dl, LLVMABIAlignmentOfType(p->td, t));
            LLVMValueRef idx = LLVMGetIntTypeWidth(t) == 32 ? LLVMGetParam(p->f, 3)
                                                            : LLVMBuildZExt(p->b, LLVMGetParam(p->f, 3), t, "");
            LLVMValueRef val = LLVMBuildSelect(p->b, use, LLVMBuildAdd(p->b, dl, idx, ""), dl, "");
            LLVMInstructionEraseFromParent(ld);
            ld = val;
            if (note_uni_load(p, dl, v) < 0 || note_uni_load(p, val, v) < 0) {
                free(ok);
                return NULL;
            }
        }
    }
    free(ok);
    return ld;
}

/* A load value_at built for v (or the value computed from it): a later
 * value_at of it is one of v. */
static int note_uni_load(pass *p, LLVMValueRef load, LLVMValueRef v) {
    if (p->nuni_loads == p->uni_loads_cap) {
        int cap = p->uni_loads_cap ? 2 * p->uni_loads_cap : 16;
        LLVMValueRef *a = realloc(p->uni_loads, sizeof *a * (size_t)cap);
        if (a) p->uni_loads = a;
        LLVMValueRef *b = realloc(p->uni_of, sizeof *b * (size_t)cap);
        if (b) p->uni_of = b;
        if (!a || !b) return mkk_ir_fail(p, "out of memory");
        p->uni_loads_cap = cap;
    }
    p->uni_loads[p->nuni_loads] = load;
    p->uni_of[p->nuni_loads++] = v;
    return 0;
}

static int crosses_site(pass *p, int def, int use, char *seen, int *stack);

/* Is one of v's uses past a site from its definition (in block bi)? */
static int value_crosses(pass *p, LLVMValueRef v, int bi, char *seen, int *stack) {
    for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) {
        LLVMValueRef user = LLVMGetUser(u);
        if (LLVMIsAPHINode(user)) {
            unsigned nin = LLVMCountIncoming(user);
            for (unsigned k = 0; k < nin; k++) {
                if (LLVMGetIncomingValue(user, k) != v) continue;
                int ub = block_index(p, LLVMGetIncomingBlock(user, k));
                if (ub != bi && crosses_site(p, bi, ub, seen, stack)) return 1;
            }
        } else {
            int ub = block_index(p, LLVMGetInstructionParent(user));
            if (ub != bi && crosses_site(p, bi, ub, seen, stack)) return 1;
        }
    }
    return 0;
}

/* Gives each use of v past a site its own value_at. Returns -1 on failure. */
static int remat_uses(pass *p, LLVMValueRef v, int bi, char *seen, int *stack) {
    int nuse = 0;
    for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) nuse++;
    LLVMValueRef *users = malloc(sizeof *users * (size_t)(nuse ? nuse : 1));
    if (!users) return -1;
    int k = 0, rc = 0;
    for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) users[k++] = LLVMGetUser(u);
    for (int j = 0; j < k && !rc; j++) {
        LLVMValueRef user = users[j];
        int dup = 0;
        for (int q = 0; q < j; q++) dup |= users[q] == user;
        if (dup || is_slot_store(p, user, v)) continue;
        if (LLVMIsAPHINode(user)) {
            unsigned nin = LLVMCountIncoming(user);
            for (unsigned q = 0; q < nin && !rc; q++) {
                if (LLVMGetIncomingValue(user, q) != v) continue;
                LLVMBasicBlockRef from = LLVMGetIncomingBlock(user, q);
                int ub = block_index(p, from);
                if (ub == bi || !crosses_site(p, bi, ub, seen, stack)) continue;
                LLVMValueRef c = value_at(p, v, LLVMGetBasicBlockTerminator(from), 0);
                if (!c)
                    rc = -1;
                else
                    LLVMSetOperand(user, q, c);
            }
        } else {
            int ub = block_index(p, LLVMGetInstructionParent(user));
            if (ub == bi || !crosses_site(p, bi, ub, seen, stack)) continue;
            LLVMValueRef c = value_at(p, v, user, 0);
            if (!c) {
                rc = -1;
                break;
            }
            unsigned nops = (unsigned)LLVMGetNumOperands(user);
            for (unsigned q = 0; q < nops; q++)
                if (LLVMGetOperand(user, q) == v) LLVMSetOperand(user, q, c);
        }
    }
    free(users);
    return rc;
}

/* Blocks where the memory of alloca `a` is used (through pointers derived
 * from it), marked in `used`. Returns -1 on failure. */
static int is_intrinsic(LLVMValueRef call, const char *prefix);

static int alloca_use_blocks(pass *p, LLVMValueRef a, char *used) {
    int cap = 64, n = 0, rc = 0;
    LLVMValueRef *work = malloc(sizeof *work * (size_t)cap);
    if (!work) return -1;
    work[n++] = a;
    for (int guard = 0; n && guard < 100000; guard++) {
        LLVMValueRef v = work[--n];
        for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) {
            LLVMValueRef user = LLVMGetUser(u);
            if (!LLVMIsAInstruction(user)) continue;
            /* not uses: lifetime markers (dropped, see below), and the mask
             * and lane an exchange fills, which its resume block stores
             * (the call itself goes): otherwise they cross the site and live
             * in the frame, two slot stores per lane at every exchange */
            if (LLVMIsACallInst(user) && is_intrinsic(user, "llvm.lifetime.")) continue;
            if (LLVMIsACallInst(user) && LLVMGetCalledValue(user) == p->fn_exchange &&
                LLVMGetOperand(user, 0) != v && LLVMGetOperand(user, 1) != v)
                continue;
            int bi = block_index(p, LLVMGetInstructionParent(user));
            if (bi >= 0) used[bi] = 1;
            if (LLVMIsAGetElementPtrInst(user) || LLVMIsABitCastInst(user) || LLVMIsAAddrSpaceCastInst(user) ||
                LLVMIsAPHINode(user) || LLVMIsASelectInst(user) || LLVMIsAPtrToIntInst(user)) {
                if (n == cap) {
                    LLVMValueRef *g = realloc(work, sizeof *work * (size_t)(cap *= 2));
                    if (!g) {
                        rc = -1;
                        break;
                    }
                    work = g;
                }
                work[n++] = user;
            }
        }
        if (rc) break;
    }
    free(work);
    return rc;
}

/* Must alloca `a` keep its contents across a site: is a block using it
 * reachable from a block using it through a site? (1, 0, or -1) */
static int alloca_crosses(pass *p, LLVMValueRef a, char *seen, int *stack) {
    int n = p->nblocks;
    char *used = calloc((size_t)n, 1);
    if (!used) return -1;
    if (alloca_use_blocks(p, a, used) < 0) {
        free(used);
        return -1;
    }
    int crosses = 0;
    for (int d = 0; d < n && !crosses; d++) {
        if (!used[d]) continue;
        memset(seen, 0, (size_t)n * 2);
        int sp = 0;
        stack[sp++] = d * 2 + ends_in_sync(p, p->blocks[d]);
        while (sp && !crosses) {
            int st = stack[--sp], x = st / 2, c = st % 2;
            for (int s = 0; s < p->nsucc[x]; s++) {
                int y = p->succ[x][s];
                if (used[y] && c) {
                    crosses = 1;
                    break;
                }
                int c2 = c || ends_in_sync(p, p->blocks[y]);
                if (!seen[y * 2 + c2]) {
                    seen[y * 2 + c2] = 1;
                    stack[sp++] = y * 2 + c2;
                }
            }
        }
    }
    free(used);
    return crosses;
}

/* ------------------------------------------------ slot coalescing
 * Two slots whose contents are never needed at the same time can be one, as
 * a register allocator coalesces the copies of a value. This matters in a
 * loop-step region (add_loop_steps): an iteration leaves either to the next
 * iteration, storing the running value into the loop phi's slot, or out of
 * the loop, storing the same value into the slot of the phi after the loop
 * (or of the variable a SIMD-group function reads). Two exits storing one
 * value to two addresses become, after O2, one store through a select of
 * the addresses: a scatter, which keeps the loop vectoriser out of the
 * region. With one slot, both exits store to one address and the region's
 * work-item loop vectorises.
 *
 * A slot qualifies when every use of its address is a load, a store to it,
 * a memcpy/memset of the whole slot, a lifetime marker or an exchange reading
 * the thread's value; group-uniform slots (read from thread 0's copy) stay
 * apart. Slots are joined only when they are related (one holds a value the
 * other's stored phi merges, or the same value) and do not interfere: no
 * store to one can come after a store to the other and before a read of the
 * other that expects the other's value. */
typedef struct {
    int rep, ok;
    LLVMValueRef *defs, *uses, *marks, *srcs;
    int ndefs, nuses, nmarks, nsrcs;
} co_slot;

static int co_push(LLVMValueRef **a, int *n, LLVMValueRef v) {
    LLVMValueRef *g = realloc(*a, sizeof *g * (size_t)(*n + 1));
    if (!g) return -1;
    g[(*n)++] = v;
    *a = g;
    return 0;
}

static int inst_pos(LLVMValueRef in) {
    int k = 0;
    for (LLVMValueRef q = LLVMGetFirstInstruction(LLVMGetInstructionParent(in)); q && q != in;
         q = LLVMGetNextInstruction(q))
        k++;
    return k;
}

/* The position in block bb of the first of the n instructions `avoid` there
 * at or after position `from` (-1: none). */
static int first_avoid(LLVMBasicBlockRef bb, int from, LLVMValueRef *avoid, const int *apos, int n) {
    int best = -1;
    for (int k = 0; k < n; k++)
        if (LLVMGetInstructionParent(avoid[k]) == bb && apos[k] >= from && (best < 0 || apos[k] < best)) best = apos[k];
    return best;
}

/* Can control go from just after instruction `from` to instruction `to`
 * without passing one of the n instructions `avoid`? */
static int reach_inst(pass *p, LLVMValueRef from, LLVMValueRef to, LLVMValueRef *avoid, const int *apos, int n,
                      char *seen, int *stack) {
    LLVMBasicBlockRef bf = LLVMGetInstructionParent(from), bt = LLVMGetInstructionParent(to);
    int pf = inst_pos(from), pt = inst_pos(to);
    int a = first_avoid(bf, pf + 1, avoid, apos, n);
    if (bf == bt && pf < pt) return a < 0 || a > pt;
    if (a >= 0) return 0; /* leaving bf passes one */
    int f = block_index(p, bf), sp = 0;
    if (f < 0) return 1;
    memset(seen, 0, (size_t)p->nblocks);
    for (int k = 0; k < p->nsucc[f]; k++) stack[sp++] = p->succ[f][k];
    while (sp) {
        int x = stack[--sp];
        if (seen[x]) continue;
        seen[x] = 1;
        LLVMBasicBlockRef bx = p->blocks[x];
        int ax = first_avoid(bx, 0, avoid, apos, n);
        if (bx == bt && (ax < 0 || ax > pt)) return 1;
        if (ax >= 0) continue;
        for (int k = 0; k < p->nsucc[x]; k++)
            if (!seen[p->succ[x][k]]) stack[sp++] = p->succ[x][k];
    }
    return 0;
}

/* Would the slots of groups a and b (their representatives) interfere? */
static int co_interfere(pass *p, co_slot *cs, int a, int b, char *seen, int *stack) {
    for (int dir = 0; dir < 2; dir++) {
        int x = dir ? b : a, y = dir ? a : b;
        /* x's value read after y's store, which came after x's store */
        LLVMValueRef *xd = NULL, *xu = NULL, *yd = NULL;
        int nxd = 0, nxu = 0, nyd = 0, bad = 0;
        for (int i = 0; i < p->nslot_addrs && !bad; i++) {
            if (cs[i].rep == x) {
                for (int k = 0; k < cs[i].ndefs && !bad; k++) bad = co_push(&xd, &nxd, cs[i].defs[k]);
                for (int k = 0; k < cs[i].nuses && !bad; k++) bad = co_push(&xu, &nxu, cs[i].uses[k]);
            } else if (cs[i].rep == y) {
                for (int k = 0; k < cs[i].ndefs && !bad; k++) bad = co_push(&yd, &nyd, cs[i].defs[k]);
            }
        }
        int *xpos = bad ? NULL : malloc(sizeof(int) * (size_t)(nxd + 1));
        if (!xpos) bad = 1;
        for (int k = 0; !bad && k < nxd; k++) xpos[k] = inst_pos(xd[k]);
        for (int i = 0; !bad && i < nxd; i++)
            for (int j = 0; !bad && j < nyd; j++) {
                if (!reach_inst(p, xd[i], yd[j], NULL, NULL, 0, seen, stack)) continue;
                for (int k = 0; !bad && k < nxu; k++) bad = reach_inst(p, yd[j], xu[k], xd, xpos, nxd, seen, stack);
            }
        free(xd);
        free(xu);
        free(yd);
        free(xpos);
        if (bad) return 1;
    }
    return 0;
}

static int co_related(co_slot *cs, int a, int b) {
    for (int i = 0; i < cs[a].nsrcs; i++)
        for (int j = 0; j < cs[b].nsrcs; j++)
            if (cs[a].srcs[i] == cs[b].srcs[j]) return 1;
    return 0;
}

static int is_intrinsic(LLVMValueRef call, const char *prefix) {
    LLVMValueRef c = LLVMGetCalledValue(call);
    return c && LLVMIsAFunction(c) && strncmp(mkk_ir_name(c), prefix, strlen(prefix)) == 0;
}

/* The slot stores at the top of each site block (a region's exit: the
 * values the thread keeps, stored in the order slot_for met them), in one
 * order: stores to slots that more site blocks store come last. Two exits
 * of a region that store the same value to one slot (a loop's running sum
 * after slot coalescing: the next iteration and the loop's exit) then both
 * end in that store, which LLVM sinks into one unconditional store after F
 * is inlined; in the other order it stays two masked stores per lane in
 * the vectorised loop-step region (measured: the `simd_sum` rows kernel's
 * loop, which one reordering in the runtime header had flipped). Stores
 * to distinct slots commute; stores to one slot keep their order. */
static int site_slot_store(pass *p, LLVMValueRef in) {
    if (!in || !LLVMIsAStoreInst(in)) return 0;
    LLVMValueRef ptr = LLVMGetOperand(in, 1);
    for (int i = 0; i < p->nslot_addrs; i++)
        if (p->slot_addrs[i] == ptr) return 1;
    return 0;
}

static LLVMValueRef first_after_phis(LLVMBasicBlockRef bb) {
    LLVMValueRef in = LLVMGetFirstInstruction(bb);
    while (in && LLVMIsAPHINode(in)) in = LLVMGetNextInstruction(in);
    return in;
}

static int order_site_stores(pass *p, const site *sites, int nsites) {
    int ns = p->nslot_addrs;
    if (ns < 2) return 0;
    int *count = calloc((size_t)ns, sizeof *count);
    LLVMValueRef *run = malloc(sizeof *run * (size_t)ns * 4 + 1);
    int *key = malloc(sizeof *key * (size_t)ns * 4 + 1);
    if (!count || !run || !key) {
        free(count);
        free(run);
        free(key);
        return mkk_ir_fail(p, "out of memory");
    }
    for (int i = 0; i < nsites; i++)
        for (LLVMValueRef in = first_after_phis(sites[i].head); site_slot_store(p, in); in = LLVMGetNextInstruction(in))
            for (int q = 0; q < ns; q++)
                if (p->slot_addrs[q] == LLVMGetOperand(in, 1)) count[q]++;
    for (int i = 0; i < nsites; i++) {
        int n = 0;
        for (LLVMValueRef in = first_after_phis(sites[i].head); site_slot_store(p, in) && n < ns * 4;
             in = LLVMGetNextInstruction(in)) {
            int k = 0;
            for (int q = 0; q < ns; q++)
                if (p->slot_addrs[q] == LLVMGetOperand(in, 1)) k = count[q];
            run[n] = in;
            key[n++] = k;
        }
        if (n < 2) continue;
        LLVMValueRef after = LLVMGetNextInstruction(run[n - 1]);
        /* a stable insertion sort by key */
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && key[b - 1] > key[b]; b--) {
                LLVMValueRef t = run[b];
                run[b] = run[b - 1];
                run[b - 1] = t;
                int u = key[b];
                key[b] = key[b - 1];
                key[b - 1] = u;
            }
        for (int a = 0; a < n; a++) {
            LLVMInstructionRemoveFromParent(run[a]);
            if (after)
                LLVMPositionBuilderBefore(p->b, after);
            else
                LLVMPositionBuilderAtEnd(p->b, sites[i].head);
            LLVMInsertIntoBuilder(p->b, run[a]);
        }
    }
    free(count);
    free(run);
    free(key);
    return 0;
}

/* The def-and-use lists of every slot, then related pairs joined greedily.
 * First the lifetime markers of allocas that moved to the frame go: the frame
 * is no stack object, and a marker in a loop-step region is a call the
 * vectoriser will not predicate. */
static int coalesce_slots(pass *p) {
    int ns = p->nslot_addrs, rc = 0;
    for (int i = 0; i < ns; i++) {
        if (!p->slot_memory[i]) continue;
        for (int again = 1; again;) {
            again = 0;
            for (LLVMUseRef use = LLVMGetFirstUse(p->slot_addrs[i]); use; use = LLVMGetNextUse(use)) {
                LLVMValueRef user = LLVMGetUser(use);
                if (LLVMIsACallInst(user) && is_intrinsic(user, "llvm.lifetime.")) {
                    LLVMInstructionEraseFromParent(user);
                    again = 1;
                    break;
                }
            }
        }
    }
    if (ns < 2) return 0;
    co_slot *cs = calloc((size_t)ns, sizeof *cs);
    char *seen = malloc((size_t)p->nblocks + 1);
    int *stack = NULL;
    size_t edges = (size_t)p->nblocks + 8;
    for (int b = 0; b < p->nblocks; b++) edges += (size_t)p->nsucc[b];
    stack = malloc(sizeof(int) * edges);
    if (!cs || !seen || !stack) {
        rc = mkk_ir_fail(p, "out of memory");
        goto out;
    }
    for (int i = 0; i < ns; i++) {
        co_slot *c = &cs[i];
        LLVMValueRef addr = p->slot_addrs[i];
        c->rep = i;
        c->ok = 1;
        for (int u = 0; u < p->nuni; u++) c->ok &= p->uni_slots[u] != i;
        for (LLVMUseRef use = LLVMGetFirstUse(addr); use && c->ok; use = LLVMGetNextUse(use)) {
            LLVMValueRef user = LLVMGetUser(use);
            int bad = 0;
            if (LLVMIsAStoreInst(user) && LLVMGetOperand(user, 1) == addr && LLVMGetOperand(user, 0) != addr &&
                !LLVMGetVolatile(user)) {
                LLVMValueRef v = LLVMGetOperand(user, 0);
                bad = co_push(&c->defs, &c->ndefs, user);
                if (!bad && !LLVMIsAConstant(v)) bad = co_push(&c->srcs, &c->nsrcs, v);
                if (!bad && LLVMIsAPHINode(v))
                    for (unsigned q = 0; q < LLVMCountIncoming(v) && !bad; q++)
                        if (!LLVMIsAConstant(LLVMGetIncomingValue(v, q)))
                            bad = co_push(&c->srcs, &c->nsrcs, LLVMGetIncomingValue(v, q));
            } else if (LLVMIsALoadInst(user) && !LLVMGetVolatile(user)) {
                bad = co_push(&c->uses, &c->nuses, user);
            } else if (LLVMIsACallInst(user)) {
                unsigned nargs = (unsigned)LLVMGetNumArgOperands(user);
                int first = LLVMGetOperand(user, 0) == addr, other = 0;
                for (unsigned q = 1; q < nargs; q++) other |= LLVMGetOperand(user, q) == addr;
                if (is_intrinsic(user, "llvm.lifetime.")) {
                    bad = co_push(&c->marks, &c->nmarks, user);
                } else if ((is_intrinsic(user, "llvm.memcpy") || is_intrinsic(user, "llvm.memmove") ||
                            is_intrinsic(user, "llvm.memset")) && nargs >= 3) {
                    LLVMValueRef len = LLVMGetOperand(user, 2);
                    int whole = LLVMIsAConstantInt(len) && LLVMConstIntGetZExtValue(len) == p->slot_sizes[i];
                    if (first && !other && whole)
                        bad = co_push(&c->defs, &c->ndefs, user);
                    else if (!first && LLVMGetOperand(user, 1) == addr && !is_intrinsic(user, "llvm.memset"))
                        bad = co_push(&c->uses, &c->nuses, user);
                    else
                        c->ok = 0;
                } else if (LLVMGetCalledValue(user) == p->fn_exchange) {
                    bad = co_push(&c->uses, &c->nuses, user); /* the thread's value is read there */
                } else {
                    c->ok = 0;
                }
            } else {
                c->ok = 0;
            }
            if (bad) {
                rc = mkk_ir_fail(p, "out of memory");
                goto out;
            }
        }
        if (!c->ndefs || !c->nsrcs) c->ok = 0;
    }
    for (int i = 0; i < ns; i++)
        for (int j = i + 1; j < ns; j++) {
            int a = cs[i].rep, b = cs[j].rep;
            if (a == b || !cs[i].ok || !cs[j].ok || p->slot_sizes[i] != p->slot_sizes[j]) continue;
            int rel = 0;
            for (int x = 0; x < ns && !rel; x++)
                for (int y = 0; y < ns && !rel; y++)
                    if (cs[x].rep == a && cs[y].rep == b) rel = co_related(cs, x, y);
            if (!rel || co_interfere(p, cs, a, b, seen, stack)) continue;
            if (getenv("MKPY_CBS_TRACE")) {
                char *sa = LLVMPrintValueToString(cs[i].defs[0]), *sb = LLVMPrintValueToString(cs[j].defs[0]);
                fprintf(stderr, "cbs: one slot for\n  %s\n  %s\n", sa, sb);
                LLVMDisposeMessage(sa);
                LLVMDisposeMessage(sb);
            }
            for (int x = 0; x < ns; x++)
                if (cs[x].rep == b) cs[x].rep = a;
        }
    for (int i = 0; i < ns; i++) {
        int r = cs[i].rep, shared = 0;
        for (int x = 0; x < ns; x++) shared |= x != i && cs[x].rep == r;
        if (!shared) continue;
        /* lifetime markers would declare the other values dead */
        for (int k = 0; k < cs[i].nmarks; k++) LLVMInstructionEraseFromParent(cs[i].marks[k]);
        if (r != i) LLVMReplaceAllUsesWith(p->slot_addrs[i], p->slot_addrs[r]);
    }
out:
    if (cs)
        for (int i = 0; i < ns; i++) {
            free(cs[i].defs);
            free(cs[i].uses);
            free(cs[i].marks);
            free(cs[i].srcs);
        }
    free(cs);
    free(seen);
    free(stack);
    return rc;
}

/* The run function's result from the two halves of its sites mask. */
static LLVMValueRef sites_went(pass *p, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMValueRef l = LLVMBuildZExt(p->b, LLVMBuildLoad2(p->b, p->i32, lo, ""), p->i64, "");
    LLVMValueRef h = LLVMBuildZExt(p->b, LLVMBuildLoad2(p->b, p->i32, hi, ""), p->i64, "");
    return LLVMBuildOr(p->b, l, LLVMBuildShl(p->b, h, const_i64(p, 32), ""), "went");
}
/* A pass's context, builder and module (the bitcode at bc_path), and their end. */
static int pass_load(pass *p, mkk_ir_module *mod, const char *bc_path, char *why, size_t whyn) {
    p->why = why;
    p->whyn = whyn;
    why[0] = 0;
    p->cx = LLVMContextCreate();
    p->b = LLVMCreateBuilderInContext(p->cx);
    if (mkk_ir_load(p->cx, bc_path, mod, why, whyn) < 0) return -1;
    p->m = mod->m;
    p->tm = mod->tm;
    return 0;
}

static void pass_unload(pass *p, mkk_ir_module *mod) {
    cfg_free(p);
    mkk_ir_dispose(mod);
    LLVMDisposeBuilder(p->b);
    LLVMContextDispose(p->cx);
}

/* The run function's pieces (mkk_cbs_build), for build_nest. */
typedef struct {
    LLVMValueRef run;          /* mkpy_kernel_cbs_run */
    LLVMTypeRef ft;            /* F's type */
    LLVMValueRef ctxv, uni, gb; /* the ctx F reads, thread 0's copy of the uniform slots, the group's coordinates */
    LLVMValueRef tx, ty, tz, next;
    LLVMValueRef acc_lo, acc_hi; /* the sites the threads went to, as bits (sites_went) */
    /* the compact form: the and and the or of the site numbers the group's
     * threads wait at after the run (equal: they all wait at one site);
     * NULL otherwise */
    LLVMValueRef w_and, w_or;
    int bits; /* the sites bitmask is kept (not with 63 sites or more: the scheduler reads next[]) */
} run_fn;

/* Adds site r to the bitmask of sites the threads went to (sites_went). */
static void note_went(pass *p, const run_fn *R, LLVMValueRef r) {
    /* lo: bit r for r < 32; hi: bit r - 32 for 32 <= r < 63, bit 31 for r >= 63 */
    LLVMValueRef r2 = LLVMBuildSub(p->b, r, const_i32(p, 32), "");
    LLVMValueRef lob = LLVMBuildSelect(
        p->b, LLVMBuildICmp(p->b, LLVMIntULT, r, const_i32(p, 32), ""),
        LLVMBuildShl(p->b, const_i32(p, 1), LLVMBuildAnd(p->b, r, const_i32(p, 31), ""), ""), const_i32(p, 0), "");
    LLVMValueRef hib = LLVMBuildSelect(
        p->b, LLVMBuildICmp(p->b, LLVMIntULT, r2, const_i32(p, 31), ""),
        LLVMBuildShl(p->b, const_i32(p, 1), LLVMBuildAnd(p->b, r2, const_i32(p, 31), ""), ""),
        LLVMBuildSelect(p->b, LLVMBuildICmp(p->b, LLVMIntUGE, r, const_i32(p, 63), ""),
                        const_i32(p, (long)0x80000000u), const_i32(p, 0), ""),
        "");
    LLVMBuildStore(p->b, LLVMBuildOr(p->b, LLVMBuildLoad2(p->b, p->i32, R->acc_lo, ""), lob, ""), R->acc_lo);
    LLVMBuildStore(p->b, LLVMBuildOr(p->b, LLVMBuildLoad2(p->b, p->i32, R->acc_hi, ""), hib, ""), R->acc_hi);
}

/* A work-item loop nest over the threads (z, y, x) of the group, x
 * innermost, running F from `site` (an i32: a constant in the per-site form,
 * the site being released in the compact one) in each thread: every thread
 * when not `checked` (a dense run: ctx->uni is thread 0's copy of the
 * group-uniform slots), else those whose next[] is `site` (ctx->uni NULL);
 * `affine`: ctx->aff set too (the x-affine slots hold). Each thread's result
 * goes to its next[] entry and into the sites bitmask; the nest ends in
 * `done`. Returns its preheader. */
static LLVMBasicBlockRef build_nest(pass *p, const run_fn *R, LLVMValueRef site, int checked, int affine,
                                    LLVMBasicBlockRef done) {
    LLVMValueRef run = R->run, ctxv = R->ctxv, uni = R->uni, tx = R->tx, ty = R->ty, tz = R->tz;
    /* z loop > y loop > x loop */
    LLVMBasicBlockRef zb = LLVMAppendBasicBlockInContext(p->cx, run, "z");
    LLVMBasicBlockRef yb = LLVMAppendBasicBlockInContext(p->cx, run, "y");
    LLVMBasicBlockRef xb = LLVMAppendBasicBlockInContext(p->cx, run, checked ? "x.checked" : "x");
    LLVMBasicBlockRef go = checked ? LLVMAppendBasicBlockInContext(p->cx, run, "go") : xb;
    LLVMBasicBlockRef xl = LLVMAppendBasicBlockInContext(p->cx, run, "x.latch");
    LLVMBasicBlockRef yl = LLVMAppendBasicBlockInContext(p->cx, run, "y.latch");
    LLVMBasicBlockRef zl = LLVMAppendBasicBlockInContext(p->cx, run, "z.latch");
    /* the nest's preheader: ctx->uni is thread 0's copy of the
     * group-uniform slots in a dense run, NULL in a checked one */
    LLVMBasicBlockRef preb = LLVMAppendBasicBlockInContext(p->cx, run, checked ? "nouni" : "uni");
    LLVMPositionBuilderAtEnd(p->b, preb);
    LLVMBuildStore(p->b, checked ? LLVMConstPointerNull(p->ptr) : uni, gep_bytes(p, ctxv, const_i64(p, 5 * 8)));
    LLVMBuildStore(p->b, affine ? uni : LLVMConstPointerNull(p->ptr), gep_bytes(p, ctxv, const_i64(p, 6 * 8)));
    for (int u = 0; !checked && u < p->nuni + (affine ? p->naff : 0); u++) {
        int si = u < p->nuni ? p->uni_slots[u] : p->aff_slots[u - p->nuni];
        LLVMTypeRef vt = LLVMTypeOf(p->slot_vals[si]);
        unsigned al = LLVMABIAlignmentOfType(p->td, vt);
        LLVMValueRef src =
            gep_bytes(p, LLVMGetParam(run, 4), const_i64(p, (long long)(p->slot_offs[si] * MKPY_CBS_MAX_THREADS)));
        LLVMValueRef ld = LLVMBuildLoad2(p->b, vt, src, "");
        LLVMSetAlignment(ld, al);
        LLVMSetAlignment(LLVMBuildStore(p->b, ld, gep_bytes(p, uni, const_i64(p, (long long)p->slot_offs[si]))), al);
    }
    LLVMBuildBr(p->b, zb);
    LLVMPositionBuilderAtEnd(p->b, zb);
    LLVMValueRef z = LLVMBuildPhi(p->b, p->i32, "z");
    LLVMBuildBr(p->b, yb);
    LLVMPositionBuilderAtEnd(p->b, yb);
    LLVMValueRef y = LLVMBuildPhi(p->b, p->i32, "y");
    /* no wrap: counts are at most 1024 (the vectoriser needs to know) */
    LLVMValueRef row =
        LLVMBuildNUWMul(p->b, LLVMBuildNUWAdd(p->b, LLVMBuildNUWMul(p->b, z, ty, ""), y, ""), tx, "row");
    LLVMBuildBr(p->b, xb);
    LLVMPositionBuilderAtEnd(p->b, xb);
    LLVMValueRef x = LLVMBuildPhi(p->b, p->i32, "x");
    LLVMValueRef i = LLVMBuildNUWAdd(p->b, row, x, "i");
    LLVMValueRef i64v = LLVMBuildZExt(p->b, i, p->i64, "");
    LLVMValueRef slotp = LLVMBuildGEP2(p->b, p->i32, R->next, &i64v, 1, "");
    LLVMValueRef cur = NULL;
    if (checked) {
        cur = LLVMBuildLoad2(p->b, p->i32, slotp, "");
        LLVMValueRef here = LLVMBuildICmp(p->b, LLVMIntEQ, cur, site, "");
        LLVMBuildCondBr(p->b, here, go, xl);
        LLVMPositionBuilderAtEnd(p->b, go);
    }
    LLVMValueRef args[] = {LLVMGetParam(run, 1), LLVMGetParam(run, 2), R->gb, i, site, ctxv, x, y, z};
    LLVMValueRef r = LLVMBuildCall2(p->b, R->ft, p->f, args, 9, "");
    LLVMBuildStore(p->b, r, slotp);
    if (!R->w_and) note_went(p, R, r);
    LLVMBasicBlockRef ran = LLVMGetInsertBlock(p->b);
    LLVMBuildBr(p->b, xl);
    LLVMPositionBuilderAtEnd(p->b, xl);
    if (R->w_and) {
        /* where the thread waits now: the site it went to, or (not released
         * by a checked run) the one it waited at; the bitmask then holds
         * every thread's site, whatever ran (the scheduler takes it as the
         * group's: a chain may have moved threads it did not release) */
        LLVMValueRef w = r;
        if (checked) {
            w = LLVMBuildPhi(p->b, p->i32, "waits");
            LLVMValueRef wv[] = {r, cur};
            LLVMBasicBlockRef wb[] = {ran, xb};
            LLVMAddIncoming(w, wv, wb, 2);
        }
        if (R->bits) note_went(p, R, w);
        LLVMValueRef lo = LLVMBuildLoad2(p->b, p->i32, R->w_and, ""), hi = LLVMBuildLoad2(p->b, p->i32, R->w_or, "");
        LLVMBuildStore(p->b, LLVMBuildAnd(p->b, w, lo, ""), R->w_and);
        LLVMBuildStore(p->b, LLVMBuildOr(p->b, w, hi, ""), R->w_or);
    }
    LLVMValueRef x1 = LLVMBuildNUWAdd(p->b, x, const_i32(p, 1), "");
    LLVMBuildCondBr(p->b, LLVMBuildICmp(p->b, LLVMIntULT, x1, tx, ""), xb, yl);
    LLVMPositionBuilderAtEnd(p->b, yl);
    LLVMValueRef y1 = LLVMBuildNUWAdd(p->b, y, const_i32(p, 1), "");
    LLVMBuildCondBr(p->b, LLVMBuildICmp(p->b, LLVMIntULT, y1, ty, ""), yb, zl);
    LLVMPositionBuilderAtEnd(p->b, zl);
    LLVMValueRef z1 = LLVMBuildNUWAdd(p->b, z, const_i32(p, 1), "");
    LLVMBuildCondBr(p->b, LLVMBuildICmp(p->b, LLVMIntULT, z1, tz, ""), zb, done);
    LLVMValueRef zv[] = {const_i32(p, 0), z1}, yv[] = {const_i32(p, 0), y1}, xv[] = {const_i32(p, 0), x1};
    LLVMBasicBlockRef zf[] = {preb, zl}, yf[] = {zb, yl}, xf[] = {yb, xl};
    LLVMAddIncoming(z, zv, zf, 2);
    LLVMAddIncoming(y, yv, yf, 2);
    LLVMAddIncoming(x, xv, xf, 2);
    return preb;
}

int mkk_cbs_build(const char *bc_path, const char *obj_path, char *why, size_t whyn) {
    pass P = {0}, *p = &P;
    int rc = -1;
    site *sites = NULL;
    int nsites = 0;
    mkk_ir_module mod = {0};

    if (pass_load(p, &mod, bc_path, why, whyn) < 0) goto done;
    p->td = LLVMGetModuleDataLayout(p->m);
    p->i8 = LLVMInt8TypeInContext(p->cx);
    p->i32 = LLVMInt32TypeInContext(p->cx);
    p->i64 = LLVMInt64TypeInContext(p->cx);
    p->ptr = LLVMPointerTypeInContext(p->cx, 0);
    p->voidt = LLVMVoidTypeInContext(p->cx);
    p->f = LLVMGetNamedFunction(p->m, "mkpy_kernel_cbs_thread");
    if (!p->f || LLVMCountParams(p->f) != 9) {
        mkk_ir_fail(p, "no mkpy_kernel_cbs_thread in the kernel");
        goto done;
    }
    find_points(p);
    if (inline_all(p) < 0) goto done;
    /* the fiber entry in the same object, in case it runs on fibers after all
     * (MKPY_ENGINE=fibers set once it was built): ordered as in mkk_fiber_build;
     * if that cannot be, those fibers keep the text's order. (jit.c's lockstep
     * builds have no fiber entry: MKPY_ENGINE is part of their in-memory key.) */
    if (mkk_ir_order_sites(p->cx, p->m, LLVMGetNamedFunction(p->m, "mkpy_kernel_thread"), why, whyn) < 0) why[0] = 0;
    find_points(p);
    p->fn_step = LLVMAddFunction(p->m, "mkpy_sync_step", LLVMFunctionType(p->voidt, NULL, 0, 0));
    p->fn_loop_step = LLVMAddFunction(p->m, "mkpy_sync_loop_step", LLVMFunctionType(p->voidt, NULL, 0, 0));

    /* E': a fresh entry block; it runs on every resume */
    LLVMBasicBlockRef old_entry = LLVMGetEntryBasicBlock(p->f);
    p->eb = LLVMInsertBasicBlockInContext(p->cx, old_entry, "cbs.entry");
    LLVMPositionBuilderAtEnd(p->b, p->eb);
    LLVMValueRef ctx_frame = ctx_field(p, 0), ctx_deposit = ctx_field(p, 1), ctx_simd = ctx_field(p, 2),
                 ctx_masks = ctx_field(p, 3);
    LLVMValueRef index32 = LLVMGetParam(p->f, 3);
    LLVMValueRef index64 = LLVMBuildZExt(p->b, index32, p->i64, "cbs.i");
    LLVMValueRef sg64 = LLVMBuildLShr(p->b, index64, const_i64(p, 5), "cbs.sg");
    LLVMValueRef lane32 = LLVMBuildAnd(p->b, index32, const_i32(p, MKPY_SIMD_WIDTH - 1), "cbs.lane");
    LLVMValueRef e_br = LLVMBuildBr(p->b, old_entry);

    /* threadgroup allocations: static sizes, dropped from the code */
    uint64_t tg_bytes = 0;
    int tg_line = 0;
    LLVMValueRef tg_file = NULL;
    {
        LLVMValueRef seen_globals[256];
        int ng = 0;
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;) {
                LLVMValueRef next = LLVMGetNextInstruction(in);
                if (LLVMIsACallInst(in) && p->fn_tg_alloc && LLVMGetCalledValue(in) == p->fn_tg_alloc) {
                    LLVMValueRef g = LLVMGetOperand(in, 0), sz = LLVMGetOperand(in, 1);
                    while (LLVMIsAConstantExpr(g)) g = LLVMGetOperand(g, 0);
                    int dup = 0;
                    for (int i = 0; i < ng; i++) dup |= seen_globals[i] == g;
                    if (!dup && LLVMIsAConstantInt(sz)) {
                        if (ng < 256) seen_globals[ng++] = g;
                        tg_bytes += LLVMConstIntGetZExtValue(sz);
                        if (tg_bytes > MKPY_MAX_THREADGROUP_MEMORY && !tg_line) {
                            LLVMValueRef l = LLVMGetOperand(in, 3);
                            tg_line = LLVMIsAConstantInt(l) ? (int)LLVMConstIntGetSExtValue(l) : 1;
                            tg_file = LLVMGetOperand(in, 2);
                        }
                    } else if (!LLVMIsAConstantInt(sz)) {
                        mkk_ir_fail(p, "a threadgroup variable of run-time size");
                        goto done;
                    }
                    LLVMInstructionEraseFromParent(in);
                }
                in = next;
            }
    }

    /* every runtime point ends its block */
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb;) {
        LLVMValueRef in = LLVMGetFirstInstruction(bb);
        while (in && !sync_kind(p, in)) in = LLVMGetNextInstruction(in);
        if (in)
            split_after(p, in); /* bb keeps what follows the call: scan it again */
        else
            bb = LLVMGetNextBasicBlock(bb);
    }

    /* lockstep: step sites between conflicting memory operations */
    for (int round = 0;; round++) {
        if (round > MAX_STEPS) {
            mkk_ir_fail(p, "too many conflicting memory operations to put in lockstep");
            goto done;
        }
        int r = insert_one_step(p);
        if (r < 0) goto done;
        if (!r) break;
    }
    if (add_latch_steps(p) < 0) goto done;
    /* then the loop steps, which may be skipped at run time: the regions
     * above are conflict-free without them */
    /* (jit.c asks for them for threadgroups of 64 threads or more: a step
     * costs about a region's overhead, which fewer threads do not repay) */
    if (program_const(p, "mkpy_cbs_loop_steps") && add_loop_steps(p) < 0) goto done;

    /* threadgroup memory from ctx->tg (after the memory analysis above,
     * which tells the variables apart by their globals) */
    LLVMPositionBuilderBefore(p->b, e_br);
    LLVMValueRef ctx_tg = ctx_field(p, 4);
    unsigned long long tg_size = privatize_threadgroup(p, ctx_tg, e_br);

    /* a resume block after every site */
    if (collect_sites(p, &sites, &nsites) < 0) goto done;
    /* The compile budget. The per-site form of the run function holds per
     * site two work-item loop nests with F inlined, which LLVM then prunes
     * and optimises; its compile time grows as (sites + 1) x F's
     * instructions (about 30 us a unit on one core: 45,056 units, about
     * 1.3 s). Past that budget the compact form is built: one dense and one
     * checked nest, F inlined once in each and entered through its switch on
     * the resume site, whose size does not grow with the sites (3 x F's
     * instructions; scalar, as a switch in the work-item loop keeps it from
     * vectorising). Past the compact form's own budget the kernel goes to
     * the fiber engine (compiled once, in a fraction of that), with the
     * reason. Counted in work, not time, the choice is deterministic. */
    int compact = 0;
    char form[200] = "";
    {
        long long ni = 0;
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) ni++;
        long long work = (long long)(nsites + 1) * ni, cwork = (long long)(MKK_CBS_COMPACT_NESTS + 1) * ni;
        int forced = program_const(p, "mkpy_cbs_compact") != 0;
        compact = forced || work > MKK_CBS_BUDGET;
        if (compact && cwork > MKK_CBS_COMPACT_BUDGET) {
            mkk_ir_fail(p, "its code exceeds the lockstep pass's compile budget (%lld instructions, %lld units of work "
                           "in the compact form, more than %d; %d resume points x %lld = %lld units in the per-site form)",
                        ni, cwork, MKK_CBS_COMPACT_BUDGET, nsites + 1, ni, work);
            goto done;
        }
        if (forced)
            snprintf(form, sizeof form, "the compact form, MKPY_CBS_COMPACT: %d resume points x %lld instructions",
                     nsites + 1, ni);
        else if (compact)
            snprintf(form, sizeof form,
                     "the compact form: %d resume points x %lld instructions = %lld units, past the per-site form's "
                     "budget of %d",
                     nsites + 1, ni, work, MKK_CBS_BUDGET);
    }
    for (int i = 0; i < nsites; i++) {
        site *s = &sites[i];
        s->head = LLVMGetInstructionParent(s->call);
        LLVMBasicBlockRef rest = LLVMGetSuccessor(LLVMGetBasicBlockTerminator(s->head), 0);
        s->resume = LLVMInsertBasicBlockInContext(p->cx, rest, "cbs.resume");
        LLVMPositionBuilderAtEnd(p->b, s->resume);
        if (s->kind == MKPY_CBS_EXCHANGE) {
            /* the call's results: the SIMD-group's buffer, its mask, the lane */
            LLVMValueRef mask_ptr = LLVMGetOperand(s->call, 2), lane_ptr = LLVMGetOperand(s->call, 3);
            LLVMValueRef buf =
                gep_bytes(p, ctx_simd, LLVMBuildMul(p->b, sg64, const_i64(p, MKPY_SIMD_BUFFER), ""));
            LLVMValueRef m = LLVMBuildLoad2(
                p->b, p->i32, LLVMBuildGEP2(p->b, p->i32, ctx_masks, &sg64, 1, ""), "cbs.mask");
            LLVMBuildStore(p->b, m, mask_ptr);
            LLVMBuildStore(p->b, lane32, lane_ptr);
            LLVMReplaceAllUsesWith(s->call, buf);
        }
        LLVMBuildBr(p->b, rest);
        LLVMSetSuccessor(LLVMGetBasicBlockTerminator(s->head), 0, s->resume);
    }
    /* the sites' release order, on this CFG */
    if (cfg_build(p) < 0) goto done;
    for (int i = 0; i < nsites; i++) sites[i].order = p->rank[block_index(p, sites[i].head)];

    /* Values a thread needs past a site: cheap ones are computed again at
     * the use (remat_uses), others kept in the thread's frame slot
     * (slot_for); allocas whose memory must outlive a region move to the
     * frame, the others stay allocas of the step function. */
    if (cfg_build(p) < 0) goto done;
    p->frame_base = ctx_frame;
    p->index64 = index64;
    p->site_heads = malloc(sizeof(int) * (size_t)(nsites ? nsites : 1));
    if (!p->site_heads) {
        mkk_ir_fail(p, "out of memory");
        goto done;
    }
    p->nsite_heads = nsites;
    for (int i = 0; i < nsites; i++) p->site_heads[i] = block_index(p, sites[i].head);
    {
        LLVMValueRef ro = LLVMGetNamedGlobal(p->m, "mkpy_cbs_readonly_args");
        p->readonly_args = ro && LLVMGetInitializer(ro) && LLVMIsAConstantInt(LLVMGetInitializer(ro))
                               ? (int)LLVMConstIntGetSExtValue(LLVMGetInitializer(ro)) : 0;
    }
    p->e_br = e_br;
    {
        int n = p->nblocks;
        char *seen = malloc((size_t)n * 2);
        int *stack = malloc(sizeof(int) * (size_t)n * 2);
        if (!seen || !stack) {
            free(seen);
            free(stack);
            mkk_ir_fail(p, "out of memory");
            goto done;
        }
        int bad = 0;
        unsigned long long stack_bytes = 0;
        for (int bi = 0; bi < n && !bad; bi++) {
            LLVMBasicBlockRef bb = p->blocks[bi];
            if (bb == p->eb) continue;
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in && !bad;) {
                LLVMValueRef next = LLVMGetNextInstruction(in);
                LLVMTypeRef ty = LLVMTypeOf(in);
                if (LLVMIsAAllocaInst(in)) {
                    if (!LLVMIsAConstantInt(LLVMGetOperand(in, 0))) {
                        mkk_ir_fail(p, "a variable-length array");
                        bad = 1;
                        break;
                    }
                    int c = alloca_crosses(p, in, seen, stack);
                    if (c < 0) {
                        bad = 1;
                    } else if (c) {
                        LLVMValueRef addr = slot_for(p, in);
                        if (!addr) {
                            bad = 1;
                        } else {
                            LLVMReplaceAllUsesWith(in, addr);
                            /* the slot outlives the alloca: forget its
                             * pointer, which LLVM may hand to a new
                             * instruction (a load that slot_for would then
                             * take for this slot) */
                            forget_slot_value(p, in);
                            LLVMInstructionEraseFromParent(in);
                        }
                    } else {
                        stack_bytes += LLVMABISizeOfType(p->td, LLVMGetAllocatedType(in)) *
                                       LLVMConstIntGetZExtValue(LLVMGetOperand(in, 0));
                        /* its memory need not outlive a region: a plain alloca
                         * of the step function, in the entry every resume runs;
                         * its lifetime markers go (one may sit in another
                         * region than its uses, see alloca_use_blocks) */
                        for (int again = 1; again;) {
                            again = 0;
                            for (LLVMUseRef u = LLVMGetFirstUse(in); u; u = LLVMGetNextUse(u)) {
                                LLVMValueRef user = LLVMGetUser(u);
                                if (LLVMIsACallInst(user) && is_intrinsic(user, "llvm.lifetime.")) {
                                    LLVMInstructionEraseFromParent(user);
                                    again = 1;
                                    break;
                                }
                            }
                        }
                        LLVMInstructionRemoveFromParent(in);
                        LLVMPositionBuilderBefore(p->b, LLVMGetFirstInstruction(p->eb));
                        LLVMInsertIntoBuilder(p->b, in);
                    }
                } else if (LLVMGetTypeKind(ty) != LLVMVoidTypeKind && LLVMGetTypeKind(ty) != LLVMTokenTypeKind &&
                           value_crosses(p, in, bi, seen, stack)) {
                    if (remat_uses(p, in, bi, seen, stack) < 0) bad = 1;
                }
                in = next;
            }
        }
        free(seen);
        free(stack);
        if (bad) {
            if (!why[0]) mkk_ir_fail(p, "out of memory");
            goto done;
        }
        /* a thread gets as much as a fiber's stack: a kernel needing more is
         * left to the fibers, which report the overflow */
        if (p->frame + stack_bytes > (128ull << 10)) {
            mkk_ir_fail(p, "a thread needs %llu bytes of variables, more than the 128 KiB a cooperative thread has",
                 p->frame + stack_bytes);
            goto done;
        }
    }
    if (coalesce_slots(p) < 0) goto done;
    if (order_site_stores(p, sites, nsites) < 0) goto done;
    unsigned long long frame_bytes = p->frame;

    /* sites become returns; E' dispatches on `resume` */
    int loop_steps = 0;
    LLVMBasicBlockRef start = LLVMGetSuccessor(e_br, 0); /* splitting may have moved it */
    LLVMInstructionEraseFromParent(e_br);
    LLVMPositionBuilderAtEnd(p->b, p->eb);
    LLVMValueRef sw = LLVMBuildSwitch(p->b, LLVMGetParam(p->f, 4), start, (unsigned)nsites);
    for (int i = 0; i < nsites; i++) {
        site *s = &sites[i];
        LLVMAddCase(sw, const_i32(p, i + 1), s->resume);
        LLVMValueRef br = LLVMGetBasicBlockTerminator(s->head);
        LLVMPositionBuilderBefore(p->b, br);
        if (s->kind == MKPY_CBS_EXCHANGE) {
            /* The lane's value: when it is a frame slot (the variable the
             * SIMD-group function took by reference, kept across the site),
             * the runtime reads it there; else it is copied to the lane's
             * deposit slot. A copy would be a strided store on the way out
             * of a loop-step region, which keeps the region's work-item
             * loop from vectorising (the `simd_sum` after a row loop). */
            LLVMValueRef val = LLVMGetOperand(s->call, 0), size = LLVMGetOperand(s->call, 1);
            int si = -1;
            for (int q = 0; q < p->nslot_addrs; q++)
                if (p->slot_addrs[q] == val) si = q;
            unsigned long long sz = LLVMIsAConstantInt(size) ? LLVMConstIntGetZExtValue(size) : 0;
            if (si >= 0 && sz && sz <= MKPY_SIMD_SLOT && sz <= p->slot_sizes[si] &&
                p->slot_offs[si] * MKPY_CBS_MAX_THREADS < (1ull << 31)) {
                s->dep_off = (unsigned)(p->slot_offs[si] * MKPY_CBS_MAX_THREADS);
                s->dep_stride = (unsigned)p->slot_sizes[si];
                s->dep_size = (unsigned)sz;
            } else {
                LLVMValueRef dst = gep_bytes(p, ctx_deposit, LLVMBuildMul(p->b, index64, const_i64(p, MKPY_SIMD_SLOT), ""));
                LLVMBuildMemCpy(p->b, dst, 1, val, 1, size);
            }
        }
        if (LLVMGetCalledValue(s->call) == p->fn_loop_step) {
            loop_steps++;
            /* A loop step pays for itself when the whole group waits there
             * (a dense run, whose work-item loop vectorises the iteration);
             * in a checked run (a few threads: a loop under `if (lid == 0)`
             * or `if (lid < 32)`, a thread's last iterations) it would cost
             * a pass over the group per iteration for the work of a few
             * threads. It orders nothing (the regions are conflict-free
             * without it), so a checked run goes straight on: ctx->uni is
             * NULL there, which LLVM folds in each nest of the run function. */
            LLVMValueRef uni = ctx_field(p, 5);
            LLVMBasicBlockRef ret = LLVMInsertBasicBlockInContext(p->cx, s->resume, "cbs.loop_step");
            LLVMBuildCondBr(p->b, LLVMBuildIsNull(p->b, uni, ""), s->resume, ret);
            LLVMPositionBuilderAtEnd(p->b, ret);
        }
        LLVMBuildRet(p->b, const_i32(p, i + 1));
        LLVMInstructionEraseFromParent(br);
        LLVMInstructionEraseFromParent(s->call);
    }

    /* the info */
    {
        LLVMTypeRef site_fields[] = {p->i32, p->i32, p->i32, p->i32, p->ptr, p->i32, p->i32, p->i32};
        LLVMTypeRef site_t = LLVMStructTypeInContext(p->cx, site_fields, 8, 0);
        LLVMValueRef *elems = malloc(sizeof *elems * (size_t)(nsites + 1));
        if (!elems) {
            mkk_ir_fail(p, "out of memory");
            goto done;
        }
        LLVMValueRef nullp = LLVMConstPointerNull(p->ptr);
        LLVMValueRef f0[] = {const_i32(p, MKPY_CBS_START), const_i32(p, 0), const_i32(p, 0), const_i32(p, 0), nullp,
                             const_i32(p, 0), const_i32(p, 0), const_i32(p, 0)};
        elems[0] = LLVMConstNamedStruct(site_t, f0, 8);
        for (int i = 0; i < nsites; i++) {
            site *s = &sites[i];
            LLVMValueRef f[] = {const_i32(p, s->kind), const_i32(p, s->order), const_i32(p, s->line),
                                const_i32(p, s->col), s->file ? s->file : nullp, const_i32(p, (long)s->dep_off),
                                const_i32(p, (long)s->dep_stride), const_i32(p, (long)s->dep_size)};
            elems[i + 1] = LLVMConstNamedStruct(site_t, f, 8);
        }
        LLVMTypeRef arr_t = LLVMArrayType(site_t, (unsigned)nsites + 1);
        LLVMValueRef arr = LLVMAddGlobal(p->m, arr_t, "mkpy_kernel_cbs_sites");
        LLVMSetInitializer(arr, LLVMConstArray(site_t, elems, (unsigned)nsites + 1));
        LLVMSetGlobalConstant(arr, 1);
        LLVMSetLinkage(arr, LLVMInternalLinkage);
        free(elems);
        LLVMTypeRef info_fields[] = {p->i32, p->i32, p->i64, p->i32, p->ptr, p->ptr, p->i64, p->ptr};
        LLVMTypeRef info_t = LLVMStructTypeInContext(p->cx, info_fields, 8, 0);
        LLVMValueRef form_s = nullp;
        if (form[0]) {
            LLVMValueRef str = LLVMConstStringInContext(p->cx, form, (unsigned)strlen(form), 0);
            form_s = LLVMAddGlobal(p->m, LLVMTypeOf(str), "mkpy_cbs_form");
            LLVMSetInitializer(form_s, str);
            LLVMSetGlobalConstant(form_s, 1);
            LLVMSetLinkage(form_s, LLVMInternalLinkage);
        }
        LLVMValueRef iv[] = {const_i32(p, nsites + 1), const_i32(p, (long)frame_bytes), const_i64(p, (long long)tg_bytes),
                             const_i32(p, tg_line), tg_file && LLVMIsAConstant(tg_file) ? tg_file : nullp, arr,
                             const_i64(p, (long long)tg_size), form_s};
        LLVMValueRef info = LLVMAddGlobal(p->m, info_t, MKPY_CBS_INFO_SYMBOL);
        LLVMSetInitializer(info, LLVMConstNamedStruct(info_t, iv, 8));
        LLVMSetGlobalConstant(info, 1);
    }

    /* mkpy_kernel_cbs_run(site, args, L, g, frame, deposit, simd, masks,
     * next, tx, ty, tz, dense): per site a work-item loop nest over the
     * threads (z, y, x) of the group waiting there, x innermost, so that
     * LLVM's loop vectoriser runs consecutive threads in SIMD lanes (their
     * positions are the loops' counters: no division per thread). With
     * `dense` every thread waits at the site and the loop checks none. The
     * runtime's memory comes as noalias arguments, so that once F is inlined
     * LLVM knows the frame aliases no buffer or threadgroup variable. */
    {
        LLVMTypeRef params[] = {p->i32, p->ptr, p->ptr, p->i64, p->ptr, p->ptr, p->ptr,
                                p->ptr, p->ptr, p->ptr, p->i32, p->i32, p->i32, p->i32};
        LLVMTypeRef rt = LLVMFunctionType(p->i64, params, 14, 0);
        LLVMValueRef run = LLVMAddFunction(p->m, MKPY_CBS_RUN_SYMBOL, rt);
        unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
        /* args and L too: nothing writes them during a run, and noalias lets
         * LLVM hoist their loads (buffer addresses, launch sizes) out of the
         * work-item loops; L's size makes those loads safe to speculate */
        for (unsigned a = 2; a <= 10; a++)
            if (a != 4) LLVMAddAttributeAtIndex(run, a, LLVMCreateEnumAttribute(p->cx, noalias, 0));
        unsigned deref = LLVMGetEnumAttributeKindForName("dereferenceable", 15);
        LLVMAddAttributeAtIndex(run, 3, LLVMCreateEnumAttribute(p->cx, deref, sizeof(struct mkpy_launch)));
        /* the args array holds every entry F reads: loads of its buffer
         * pointers may then leave the nests and the loop around them (a
         * gather through a pointer loaded inside the loop is one LAA cannot
         * bound, and the nest is not vectorised). Only with loop steps: see
         * `chain` below. */
        {
            long long top = -1;
            for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
                for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
                    int e = args_entry(p, in);
                    if (e > top) top = e;
                }
            if (top >= 0 && loop_steps) {
                LLVMAddAttributeAtIndex(run, 2, LLVMCreateEnumAttribute(p->cx, deref, (unsigned long long)(top + 1) * 8));
                LLVMAddAttributeAtIndex(run, 2, LLVMCreateEnumAttribute(p->cx, LLVMGetEnumAttributeKindForName("align", 5), 8));
            }
        }
        LLVMTypeRef ft = LLVMGlobalGetValueType(p->f);
        LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(p->cx, run, "entry");
        LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(p->cx, run, "out");
        /* the result: bit r (r < 63) set when a released thread went on to
         * site r, bit 63 for MKPY_CBS_DONE or a site >= 63. Kept as two
         * 32-bit halves (allocas that mem2reg turns into or-reductions
         * across the loops): with 64-bit lanes in the work-item loop the
         * vectoriser chose 8 threads a vector for the loop-step regions of
         * the reductions, with 32-bit ones 16 (zmm). */
        LLVMPositionBuilderAtEnd(p->b, entry);
        LLVMValueRef acc_lo = LLVMBuildAlloca(p->b, p->i32, "sites.lo");
        LLVMValueRef acc_hi = LLVMBuildAlloca(p->b, p->i32, "sites.hi");
        LLVMBuildStore(p->b, const_i32(p, 0), acc_lo);
        LLVMBuildStore(p->b, const_i32(p, 0), acc_hi);
        LLVMValueRef w_and = NULL, w_or = NULL;
        if (compact) {
            w_and = LLVMBuildAlloca(p->b, p->i32, "waits.and");
            w_or = LLVMBuildAlloca(p->b, p->i32, "waits.or");
            LLVMBuildStore(p->b, const_i32(p, -1), w_and);
            LLVMBuildStore(p->b, const_i32(p, 0), w_or);
        }
        LLVMPositionBuilderAtEnd(p->b, out);
        /* (the bitmask is not kept by the compact form from 63 sites on:
         * bit 63 alone, "read next[]") */
        LLVMValueRef ret = sites_went(p, acc_lo, acc_hi);
        if (compact && nsites >= 63) ret = LLVMBuildOr(p->b, ret, const_i64(p, (long long)(1ull << 63)), "");
        LLVMBuildRet(p->b, ret);
        LLVMPositionBuilderAtEnd(p->b, entry);
        /* the ctx F reads, rebuilt from the arguments (SROA forwards it) */
        LLVMTypeRef ctx_fields[] = {p->ptr, p->ptr, p->ptr, p->ptr, p->ptr, p->ptr, p->ptr};
        LLVMTypeRef ctx_t = LLVMStructTypeInContext(p->cx, ctx_fields, 7, 0);
        LLVMValueRef ctxv = LLVMBuildAlloca(p->b, ctx_t, "ctx");
        /* thread 0's copy of the group-uniform slots, for dense runs */
        LLVMValueRef uni = LLVMBuildAlloca(p->b, LLVMArrayType(p->i8, (unsigned)(frame_bytes ? frame_bytes : 1)), "uni");
        LLVMSetAlignment(uni, 64);
        LLVMBuildStore(p->b, LLVMConstPointerNull(p->ptr), gep_bytes(p, ctxv, const_i64(p, 5 * 8)));
        LLVMBuildStore(p->b, LLVMConstPointerNull(p->ptr), gep_bytes(p, ctxv, const_i64(p, 6 * 8)));
        for (int f = 0; f < 5; f++) {
            /* params: frame, deposit, simd, masks, (next), tg */
            unsigned param = f < 4 ? (unsigned)(4 + f) : 9u;
            LLVMBuildStore(p->b, LLVMGetParam(run, param), gep_bytes(p, ctxv, const_i64(p, f * 8)));
        }
        /* the group's coordinates, once per run (see mkpy_kernel_cbs_group) */
        LLVMTypeRef gb_t = LLVMArrayType(p->i32, 3);
        LLVMValueRef gb = LLVMBuildAlloca(p->b, gb_t, "group");
        {
            LLVMValueRef gfn = LLVMGetNamedFunction(p->m, "mkpy_kernel_cbs_group");
            if (!gfn) {
                mkk_ir_fail(p, "no mkpy_kernel_cbs_group in the kernel");
                goto done;
            }
            LLVMAddAttributeAtIndex(gfn, LLVMAttributeFunctionIndex,
                                    LLVMCreateEnumAttribute(p->cx, LLVMGetEnumAttributeKindForName("alwaysinline", 12), 0));
            LLVMValueRef gargs[] = {LLVMGetParam(run, 2), LLVMGetParam(run, 3), gb};
            LLVMBuildCall2(p->b, LLVMGlobalGetValueType(gfn), gfn, gargs, 3, "");
        }
        LLVMValueRef tx = LLVMGetParam(run, 10), ty = LLVMGetParam(run, 11), tz = LLVMGetParam(run, 12);
        unsigned long long flat = program_const(p, "mkpy_cbs_flat");
        /* a group of the launch is at least one thread in each dimension and
         * at most its threadgroup: one thread where the threadgroup has one */
        if (flat & 1) ty = const_i32(p, 1);
        if (flat & 2) tz = const_i32(p, 1);
        LLVMValueRef dense = LLVMBuildICmp(p->b, LLVMIntNE, LLVMGetParam(run, 13), const_i32(p, 0), "dense");
        LLVMValueRef empty = LLVMBuildOr(
            p->b, LLVMBuildICmp(p->b, LLVMIntEQ, tx, const_i32(p, 0), ""),
            LLVMBuildOr(p->b, LLVMBuildICmp(p->b, LLVMIntEQ, ty, const_i32(p, 0), ""),
                        LLVMBuildICmp(p->b, LLVMIntEQ, tz, const_i32(p, 0), ""), ""),
            "");
        LLVMBasicBlockRef dispatch = LLVMAppendBasicBlockInContext(p->cx, run, "dispatch");
        LLVMBuildCondBr(p->b, empty, out, dispatch);
        LLVMPositionBuilderAtEnd(p->b, dispatch);
        /* With loop steps `chain` comes back here: one loop around the
         * nests, whose header is this block (a jump from chain into a nest
         * makes a cycle with two entries, irreducible: LLVM's loop passes
         * skip it, so the buffer pointers the nests load stayed in them, and
         * LAA, which cannot bound a gather through such a pointer, gave up).
         * Without, chain jumps into the nest: measured, the trivial-body
         * kernel (one barrier, 16 MB in and out) ran 2x slower with the
         * loop and the hoisted pointers, for reasons not found (the nests'
         * code is the same instruction for instruction). */
        LLVMValueRef site_v = LLVMBuildPhi(p->b, p->i32, "site");
        LLVMValueRef dense_v = LLVMBuildPhi(p->b, LLVMInt1TypeInContext(p->cx), "dense.v");
        {
            LLVMValueRef in_v[] = {LLVMGetParam(run, 0)}, in_d[] = {dense};
            LLVMBasicBlockRef in_b[] = {entry};
            LLVMAddIncoming(site_v, in_v, in_b, 1);
            LLVMAddIncoming(dense_v, in_d, in_b, 1);
        }
        LLVMValueRef rsw = compact ? NULL : LLVMBuildSwitch(p->b, site_v, out, (unsigned)nsites + 1);
        LLVMValueRef next = LLVMGetParam(run, 8);
        /* After a dense run in which every thread went on to one barrier or
         * loop step, the scheduler would release that site densely: `chain`
         * does so in this call (threads that returned, or an exchange, which
         * needs the runtime to gather deposits, go back to the scheduler).
         * A group of a barrier kernel then costs one call, not one per barrier. */
        LLVMBasicBlockRef chain = LLVMAppendBasicBlockInContext(p->cx, run, "chain");
        LLVMBasicBlockRef *dense_head = calloc((size_t)nsites + 1, sizeof *dense_head);
        if (!dense_head) {
            mkk_ir_fail(p, "out of memory");
            goto done;
        }
        run_fn R = {run, ft, ctxv, uni, gb, tx, ty, tz, next, acc_lo, acc_hi, w_and, w_or, !compact || nsites < 63};
        if (compact) {
            /* one dense nest and one checked nest, F entered at the site
             * released (its switch on `resume`, in the work-item loop); both
             * chain on when every thread of the group then waits at one
             * barrier or step, as the scheduler would release it */
            LLVMBasicBlockRef dh = build_nest(p, &R, site_v, 0, 0, chain), ch = build_nest(p, &R, site_v, 1, 0, chain);
            LLVMPositionBuilderAtEnd(p->b, dispatch);
            LLVMBuildCondBr(p->b, dense_v, dh, ch);
            /* chain: every thread waits at one site (the and and the or of
             * their sites equal), a barrier or a step; the table says which
             * sites are */
            LLVMTypeRef tab_t = LLVMArrayType(p->i8, (unsigned)nsites + 1);
            LLVMValueRef *kinds = malloc(sizeof *kinds * (size_t)(nsites + 1));
            if (!kinds) {
                free(dense_head);
                mkk_ir_fail(p, "out of memory");
                goto done;
            }
            kinds[0] = LLVMConstInt(p->i8, 0, 0);
            for (int j = 1; j <= nsites; j++)
                kinds[j] = LLVMConstInt(p->i8, sites[j - 1].kind == MKPY_CBS_BARRIER || sites[j - 1].kind == MKPY_CBS_STEP, 0);
            LLVMValueRef tab = LLVMAddGlobal(p->m, tab_t, "mkpy_cbs_chainable");
            LLVMSetInitializer(tab, LLVMConstArray(p->i8, kinds, (unsigned)nsites + 1));
            LLVMSetGlobalConstant(tab, 1);
            LLVMSetLinkage(tab, LLVMInternalLinkage);
            free(kinds);
            LLVMPositionBuilderAtEnd(p->b, chain);
            LLVMValueRef lo = LLVMBuildLoad2(p->b, p->i32, w_and, ""), hi = LLVMBuildLoad2(p->b, p->i32, w_or, "");
            LLVMBasicBlockRef look = LLVMAppendBasicBlockInContext(p->cx, run, "chain.look");
            LLVMBasicBlockRef pre = LLVMAppendBasicBlockInContext(p->cx, run, "chain.to");
            LLVMBuildCondBr(p->b,
                            LLVMBuildAnd(p->b, LLVMBuildICmp(p->b, LLVMIntEQ, lo, hi, ""),
                                         LLVMBuildICmp(p->b, LLVMIntULE, lo, const_i32(p, nsites), ""), ""),
                            look, out);
            LLVMPositionBuilderAtEnd(p->b, look);
            LLVMValueRef lo64 = LLVMBuildZExt(p->b, lo, p->i64, "");
            LLVMValueRef idx[] = {const_i64(p, 0), lo64};
            LLVMValueRef can = LLVMBuildLoad2(p->b, p->i8, LLVMBuildInBoundsGEP2(p->b, tab_t, tab, idx, 2, ""), "");
            LLVMBuildCondBr(p->b, LLVMBuildICmp(p->b, LLVMIntNE, can, LLVMConstInt(p->i8, 0, 0), ""), pre, out);
            LLVMPositionBuilderAtEnd(p->b, pre);
            LLVMBuildStore(p->b, const_i32(p, 0), acc_lo);
            LLVMBuildStore(p->b, const_i32(p, 0), acc_hi);
            LLVMBuildStore(p->b, const_i32(p, -1), w_and);
            LLVMBuildStore(p->b, const_i32(p, 0), w_or);
            LLVMBuildBr(p->b, dispatch);
            LLVMValueRef in_v[] = {lo}, in_d[] = {LLVMConstInt(LLVMInt1TypeInContext(p->cx), 1, 0)};
            LLVMAddIncoming(site_v, in_v, &pre, 1);
            LLVMAddIncoming(dense_v, in_d, &pre, 1);
        }
        for (int k = 0; !compact && k <= nsites; k++) {
            LLVMBasicBlockRef pick = LLVMAppendBasicBlockInContext(p->cx, run, "site");
            LLVMAddCase(rsw, const_i32(p, k), pick);
            LLVMBasicBlockRef heads[3];
            /* the x-affine slots to check before a dense run here */
            int naff_k = 0;
            for (int a = 0; k > 0 && a < p->naff; a++)
                naff_k += p->aff_ok[(size_t)a * (size_t)(p->nsite_heads + 1) + (size_t)(k - 1)];
            for (int variant = 0; variant < (naff_k ? 3 : 2); variant++) {
                int checked = variant == 1, affine = variant == 2;
                heads[variant] = build_nest(p, &R, const_i32(p, k), checked, affine, checked ? out : chain);
                if (variant == 0) dense_head[k] = heads[variant];
            }
            /* phis of the nests name `pick` (or the check) as the entry: one branch there */
            LLVMPositionBuilderAtEnd(p->b, pick);
            if (!naff_k) {
                LLVMBuildCondBr(p->b, dense_v, heads[0], heads[1]);
                continue;
            }
            /* a dense run: are the x-affine slots thread 0's value plus the
             * thread's index in every thread? (a loop LLVM vectorises) */
            LLVMBasicBlockRef chk = LLVMAppendBasicBlockInContext(p->cx, run, "aff.check");
            LLVMBasicBlockRef chl = LLVMAppendBasicBlockInContext(p->cx, run, "aff.loop");
            LLVMBasicBlockRef chd = LLVMAppendBasicBlockInContext(p->cx, run, "aff.done");
            LLVMBuildCondBr(p->b, dense_v, chk, heads[1]);
            LLVMPositionBuilderAtEnd(p->b, chk);
            LLVMValueRef count = LLVMBuildNUWMul(p->b, LLVMBuildNUWMul(p->b, tx, ty, ""), tz, "");
            LLVMValueRef d0[64];
            int na = 0;
            for (int a = 0; a < p->naff && na < 64; a++) {
                if (!p->aff_ok[(size_t)a * (size_t)(p->nsite_heads + 1) + (size_t)(k - 1)]) continue;
                int si = p->aff_slots[a];
                LLVMTypeRef vt = LLVMTypeOf(p->slot_vals[si]);
                LLVMValueRef src = gep_bytes(p, LLVMGetParam(run, 4),
                                             const_i64(p, (long long)(p->slot_offs[si] * MKPY_CBS_MAX_THREADS)));
                d0[na] = LLVMBuildLoad2(p->b, vt, src, "");
                LLVMSetAlignment(d0[na++], LLVMABIAlignmentOfType(p->td, vt));
            }
            LLVMBuildBr(p->b, chl);
            LLVMPositionBuilderAtEnd(p->b, chl);
            LLVMTypeRef i1 = LLVMInt1TypeInContext(p->cx);
            LLVMValueRef t = LLVMBuildPhi(p->b, p->i32, "t"), okp = LLVMBuildPhi(p->b, i1, "aff.ok"), okv = okp;
            LLVMValueRef t64 = LLVMBuildZExt(p->b, t, p->i64, "");
            na = 0;
            for (int a = 0; a < p->naff && na < 64; a++) {
                if (!p->aff_ok[(size_t)a * (size_t)(p->nsite_heads + 1) + (size_t)(k - 1)]) continue;
                int si = p->aff_slots[a];
                LLVMTypeRef vt = LLVMTypeOf(p->slot_vals[si]);
                LLVMValueRef off = LLVMBuildAdd(p->b, const_i64(p, (long long)(p->slot_offs[si] * MKPY_CBS_MAX_THREADS)),
                                                LLVMBuildMul(p->b, t64, const_i64(p, (long long)p->slot_sizes[si]), ""), "");
                LLVMValueRef v = LLVMBuildLoad2(p->b, vt, gep_bytes(p, LLVMGetParam(run, 4), off), "");
                LLVMSetAlignment(v, LLVMABIAlignmentOfType(p->td, vt));
                LLVMValueRef tt = LLVMGetIntTypeWidth(vt) == 32 ? t : t64;
                LLVMValueRef e = LLVMBuildAdd(p->b, d0[na++], tt, "");
                okv = LLVMBuildAnd(p->b, okv, LLVMBuildICmp(p->b, LLVMIntEQ, v, e, ""), "");
            }
            LLVMValueRef t1 = LLVMBuildNUWAdd(p->b, t, const_i32(p, 1), "");
            LLVMBuildCondBr(p->b, LLVMBuildICmp(p->b, LLVMIntULT, t1, count, ""), chl, chd);
            {
                LLVMValueRef tv[] = {const_i32(p, 0), t1}, ov[] = {LLVMConstInt(i1, 1, 0), okv};
                LLVMBasicBlockRef tb[] = {chk, chl};
                LLVMAddIncoming(t, tv, tb, 2);
                LLVMAddIncoming(okp, ov, tb, 2);
            }
            LLVMPositionBuilderAtEnd(p->b, chd);
            LLVMBuildCondBr(p->b, okv, heads[2], heads[0]);
        }
        if (!compact) LLVMPositionBuilderAtEnd(p->b, chain);
        LLVMValueRef went = compact ? NULL : sites_went(p, acc_lo, acc_hi);
        LLVMValueRef csw = compact ? NULL : LLVMBuildSwitch(p->b, went, out, 8);
        for (int j = 1; !compact && j <= nsites && j < 63; j++) {
            if (sites[j - 1].kind != MKPY_CBS_BARRIER && sites[j - 1].kind != MKPY_CBS_STEP) continue;
            LLVMBasicBlockRef pre = LLVMAppendBasicBlockInContext(p->cx, run, "chain.to");
            LLVMAddCase(csw, const_i64(p, 1ll << j), pre);
            LLVMPositionBuilderAtEnd(p->b, pre);
            LLVMBuildStore(p->b, const_i32(p, 0), acc_lo);
            LLVMBuildStore(p->b, const_i32(p, 0), acc_hi);
            if (!loop_steps) {
                LLVMBuildBr(p->b, dense_head[j]);
                continue;
            }
            LLVMBuildBr(p->b, dispatch);
            LLVMValueRef in_v[] = {const_i32(p, j)}, in_d[] = {LLVMConstInt(LLVMInt1TypeInContext(p->cx), 1, 0)};
            LLVMAddIncoming(site_v, in_v, &pre, 1);
            LLVMAddIncoming(dense_v, in_d, &pre, 1);
        }
        free(dense_head);
        unsigned always = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
        LLVMAddAttributeAtIndex(p->f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(p->cx, always, 0));
        LLVMSetLinkage(p->f, LLVMInternalLinkage);
    }
    /* the step marker is gone: drop its declaration */
    if (!LLVMGetFirstUse(p->fn_step)) LLVMDeleteFunction(p->fn_step);
    if (!LLVMGetFirstUse(p->fn_loop_step)) LLVMDeleteFunction(p->fn_loop_step);

    /* Facts that hold on a branch, put into the code below it, in F while it
     * is whole: in the `simd_sum` row reduction's region after the barrier,
     * `if (sg == 0) ... part[lane]` has lane = index & 31 with index < 32
     * known there, so the read is part[index]. The final O2 inlines F into
     * the work-item loops and SimplifyCFG first turns such branches into
     * selects, after which the fact is lost: the loop kept a gather and the
     * vectoriser's cost model left the 256-thread loop scalar (12-15% of the
     * kernel in cache). Correlated value propagation is exact integer
     * reasoning: the same bits. */
    if (run_inliner(p, "function(correlated-propagation)") < 0) goto done;
    if (mkk_ir_finish(p->m, p->tm, obj_path, 1, "split.ll", "final.ll", why, whyn) < 0) goto done;
    rc = 0;
done:
    free(p->slot_addrs);
    free(p->slot_vals);
    free(p->slot_memory);
    free(p->slot_offs);
    free(p->slot_sizes);
    free(p->dom);
    free(p->uni_slots);
    free(p->site_heads);
    free(p->uni_loads);
    free(p->uni_of);
    free(p->aff_slots);
    free(p->aff_ok);
    free(sites);
    pass_unload(p, &mod);
    return rc;
}

/* ------------------------------------------- the fiber engine's order */

/* A runtime point of the fiber engine's order: a call of a barrier or
 * SIMD-group function, or (latch) the end of a loop's latch block. */
typedef struct {
    int rank, pos; /* the block's thread-frontier rank; the place in it */
    LLVMValueRef at; /* the call, or the latch's terminator */
    int latch;
} order_point;

static int cmp_point(const void *x, const void *y) {
    const order_point *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* A debug location for a call put before `at`: at's own, else the nearest
 * one before it in its block, else any in f (a call of a function with
 * debug information needs one, or the verifier refuses the module). */
static LLVMMetadataRef loc_near(LLVMValueRef f, LLVMValueRef at) {
    for (LLVMValueRef q = at; q; q = LLVMGetPreviousInstruction(q)) {
        LLVMMetadataRef l = LLVMInstructionGetDebugLoc(q);
        if (l) return l;
    }
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef q = LLVMGetFirstInstruction(bb); q; q = LLVMGetNextInstruction(q)) {
            LLVMMetadataRef l = LLVMInstructionGetDebugLoc(q);
            if (l) return l;
        }
    return NULL;
}

/* Puts the fiber engine's order into f, whose runtime points are all its
 * own calls (everything inlined): before each barrier and SIMD-group
 * function a call mkpy_sync_order(rank, 0), rank being the point's place
 * in the thread-frontier order of f's blocks (cfg_build, the order in which
 * the lockstep engine releases its sites) and in its block; and at the end
 * of the latch of every loop holding a SIMD-group function or
 * simdgroup_barrier, mkpy_sync_order(rank, 1), where the fiber waits as at a
 * SIMD-group function, so that a loop's lanes start each iteration together
 * (add_latch_steps is the lockstep engine's). Returns 1 when done, 0 when
 * f has no point; else nothing is changed (the fibers fall back to the
 * text's order) and it returns -2 when f still reaches a point through a
 * call, -1 when the control flow cannot be ranked (irreducible), with the
 * reason in `why`. */
int mkk_ir_order_sites(LLVMContextRef cx, LLVMModuleRef m, LLVMValueRef f, char *why, size_t whyn) {
    pass P = {0}, *p = &P;
    p->cx = cx;
    p->m = m;
    p->f = f;
    p->why = why;
    p->whyn = whyn;
    find_points(p);
    LLVMValueRef fn_order = LLVMGetNamedFunction(m, "mkpy_sync_order");
    if (!fn_order || !f || LLVMIsDeclaration(f)) return 0;
    int npoints = 0, rc = 0;
    char *simd_in = NULL; /* blocks holding a SIMD-group point */
    LLVMValueRef *seen = malloc(4096 * sizeof *seen);
    if (!seen) return mkk_ir_fail(p, "out of memory");
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            if (!LLVMIsACallInst(in) && !LLVMIsAInvokeInst(in)) continue;
            LLVMValueRef c = LLVMGetCalledValue(in);
            if (LLVMIsAInlineAsm(c) || runtime_table_call(c)) continue;
            if (is_sync_fn(p, c)) {
                npoints++;
                continue;
            }
            /* the runtime's other points (threadgroup allocations, this order) */
            if (LLVMIsAFunction(c) && strncmp(mkk_ir_name(c), "mkpy_sync_", 10) == 0) continue;
            int nseen = 0;
            if (!LLVMIsAFunction(c) || (!LLVMIsDeclaration(c) && reaches_sync(p, c, seen, &nseen))) {
                free(seen);
                return mkk_ir_fail(p, "a barrier or SIMD-group function is reached through a call that cannot be "
                                      "inlined (%s)", LLVMIsAFunction(c) ? mkk_ir_name(c) : "a function pointer") -
                       1; /* -2: it could not be ranked in place */
            }
        }
    free(seen);
    if (!npoints) return 0;

    loops L;
    order_point *pt = NULL;
    LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
    int nloops = natural_loops(p, &L), n = L.n, np = 0;
    if (nloops < 0) {
        rc = -1;
        goto out;
    }
    pt = malloc(sizeof *pt * ((size_t)npoints + (size_t)nloops + 1));
    if (!pt) {
        rc = mkk_ir_fail(p, "out of memory");
        goto out;
    }
    simd_in = calloc((size_t)n, 1);
    if (!simd_in) {
        rc = mkk_ir_fail(p, "out of memory");
        goto out;
    }
    for (int bi = 0; bi < n; bi++) {
        int pos = 0;
        for (LLVMValueRef in = LLVMGetFirstInstruction(p->blocks[bi]); in; in = LLVMGetNextInstruction(in), pos++) {
            LLVMValueRef c = callee(in);
            if (!c || !is_sync_fn(p, c)) continue;
            if (c != p->fn_barrier) simd_in[bi] = 1;
            pt[np++] = (order_point){p->rank[bi], pos, in, 0};
        }
    }
    for (int l = 0; l < nloops; l++) {
        const char *in = L.blocks + (size_t)l * n;
        int need = 0, dup = 0;
        for (int x = 0; x < n && !need; x++) need = in[x] && simd_in[x];
        for (int j = 0; j < np && need && !dup; j++)
            dup = pt[j].latch && pt[j].at == LLVMGetBasicBlockTerminator(p->blocks[L.latch[l]]);
        if (need && !dup)
            pt[np++] = (order_point){p->rank[L.latch[l]], 1 << 30, LLVMGetBasicBlockTerminator(p->blocks[L.latch[l]]), 1};
    }
    qsort(pt, (size_t)np, sizeof *pt, cmp_point);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cx), ty = LLVMGlobalGetValueType(fn_order);
    for (int i = 0; i < np; i++) {
        LLVMPositionBuilderBefore(b, pt[i].at);
        LLVMSetCurrentDebugLocation2(b, loc_near(f, pt[i].at));
        LLVMValueRef args[2] = {LLVMConstInt(i32, (unsigned)i, 0), LLVMConstInt(i32, (unsigned)pt[i].latch, 0)};
        LLVMBuildCall2(b, ty, fn_order, args, 2, "");
    }
    rc = 1;
out:
    free(pt);
    free(simd_in);
    loops_free(&L);
    cfg_free(p);
    LLVMDisposeBuilder(b);
    return rc;
}

/* The fiber engine's object (mkpy-cbs-pass --fibers): the kernel function
 * (what the fiber entry mkpy_kernel_thread calls) with everything it calls
 * inlined, its runtime points ordered (mkk_ir_order_sites), then O2 and the
 * object; for kernels the lockstep engine declines or is not asked to take.
 * Only the kernel function is flattened, and the lockstep engine's unused
 * entry is dropped: the object holds the kernel once, as clang's would (the
 * first version inlined it into every entry and optimised twice, and
 * compiled a kernel of hundreds of barriers in 2.5 s instead of clang's 0.6). */
int mkk_fiber_build(const char *bc_path, const char *obj_path, char *why, size_t whyn) {
    pass P = {0}, *p = &P;
    int rc = -1;
    mkk_ir_module mod = {0};
    if (pass_load(p, &mod, bc_path, why, whyn) < 0) goto done;
    p->f = LLVMGetNamedFunction(p->m, "mkpy_kernel_thread");
    if (!p->f || LLVMIsDeclaration(p->f)) {
        mkk_ir_fail(p, "no mkpy_kernel_thread in the kernel");
        goto done;
    }
    find_points(p);
    for (const char *const *n = (const char *const[]){"mkpy_kernel_cbs_thread", "mkpy_kernel_cbs_group", NULL}; *n;
         n++) {
        LLVMValueRef fn = LLVMGetNamedFunction(p->m, *n);
        if (fn && !LLVMGetFirstUse(fn)) LLVMDeleteFunction(fn);
    }
    /* the kernel function: the one function the entry calls that reaches a point */
    LLVMValueRef kern = NULL, *seen = malloc(4096 * sizeof *seen);
    int nk = 0;
    if (!seen) {
        mkk_ir_fail(p, "out of memory");
        goto done;
    }
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(p->f); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            LLVMValueRef c = callee(in);
            int nseen = 0;
            if (c && LLVMIsAFunction(c) && !LLVMIsDeclaration(c) && !is_sync_fn(p, c) && c != kern &&
                reaches_sync(p, c, seen, &nseen)) {
                kern = c;
                nk++;
            }
        }
    free(seen);
    int r = -2;
    if (nk == 1) {
        for (LLVMValueRef fn = LLVMGetFirstFunction(p->m); fn; fn = LLVMGetNextFunction(fn)) {
            const char *n = mkk_ir_name(fn);
            if (!LLVMIsDeclaration(fn) && fn != kern && strncmp(n, "mkpy_kernel_", 12) != 0 &&
                strncmp(n, "mkpy_sync_", 10) != 0)
                force_inline(p, fn);
        }
        /* SROA turns the runtime header's function pointers (take()'s `pick`)
         * back into direct calls, as in the checker's pass */
        if (run_inliner(p, "always-inline,function(sroa,instsimplify,simplifycfg)") < 0) goto done;
        r = mkk_ir_order_sites(p->cx, p->m, kern, why, whyn);
    }
    if (nk != 1 || r == -2) {
        /* not one kernel function, or a point still behind a call: everything
         * into the entry and O2, as for the lockstep engine */
        why[0] = 0;
        if (inline_all(p) < 0) goto done;
        r = mkk_ir_order_sites(p->cx, p->m, p->f, why, whyn);
    }
    if (r < 0) goto done;
    if (!LLVMGetNamedFunction(p->m, "mkpy_sync_order")) {
        mkk_ir_fail(p, "the runtime header lacks mkpy_sync_order");
        goto done;
    }
    if (mkk_ir_finish(p->m, p->tm, obj_path, -1, "fibers.ll", NULL, why, whyn) < 0) goto done;
    rc = 0;
done:
    pass_unload(p, &mod);
    return rc;
}
