"""A differential fuzzer for Metal kernels (issue #25), in the spirit of Csmith and CLsmith.

It generates random, well-defined Metal kernels (``mx.fast.metal_kernel`` source and header) from
a small grammar, runs each one on several *engines* and compares the outputs: any disagreement,
and any error (the checker's findings included), is a bug, which it then shrinks over the
grammar to a minimal kernel.

The grammar (``Gen``): nested uniform and divergent ``if``/``else`` with conditions drawn from
every thread attribute, the inputs and constants; bounded ``for`` loops with early ``break`` and
``continue``; ``threadgroup_barrier`` and ``simdgroup_barrier``; every ``simd_*`` and ``quad_*``
function (reductions, prefixes, shuffles, broadcasts, fills, votes); a ``threadgroup`` array, a
``threadgroup`` scalar and a ``threadgroup`` atomic; templated helpers in the header (pure ones,
and ones holding a SIMD-group function or a barrier); the kernel's own template arguments.

What keeps a kernel well defined (so that Metal gives one answer; docs/design.md "Differential
fuzzing of the engines"):

* Every value is a ``uint`` (wrapping arithmetic; a shift amount is masked, a divisor made odd);
  float and int SIMD-group reductions take small integers, so every order of summation is exact.
* Each variable has a *level* fixed at its declaration: 0 = the same in the whole threadgroup,
  1 = the same in a SIMD-group, 2 = per thread. A variable is assigned only where the control
  flow and the expression are no more divergent than its level. Conditions take the level of
  their expression; a branch or loop body runs at the level of its condition.
* A threadgroup barrier appears only at level 0 (every enclosing condition and loop uniform in
  the threadgroup); a loop that holds one ends with one, so a phase never spans an iteration.
* Threadgroup memory, per phase (between barriers): a thread writes only its own element, and
  another thread's element is read only in a phase with no write; the scalar is written by
  thread 0 only and read in a phase without writes; the atomic gets one kind of update per
  phase (its fetch results unused) and is read only in a phase without updates.
* A function that reads a given lane (shuffles, broadcast, fills) appears only where the whole
  SIMD-group (quad) is active: level <= 1 and a threadgroup size that is a multiple of 32 (4).
  Their lane and delta arguments are SIMD-group uniform.
* No SIMD-group function or barrier where the active lanes of one call could come from two
  iterations of a loop: not under a per-thread ``if`` inside a loop, not after a per-thread
  ``continue``, not in a per-thread loop inside another loop. (Both CPU engines now keep
  iterations apart, as a GPU's reconvergence does: docs/design.md, "the fiber engine's release
  order". The CUDA target now tracks Metal's active mask per iteration too (docs/design.md,
  "Metal's SIMD-group semantics in divergent code"); ``--mixed-iterations``, or
  ``MKPY_FUZZ_MIXED_ITERATIONS=1``, lifts the rule, for use once the GPU has confirmed it.)
* No ``return`` and no partial threadgroups.

Engines are callables ``run(batch) -> [result per launch]`` (``Engine``); the defaults run the
lockstep engine, the fiber engine (``MKPY_ENGINE=fibers``) and the checker (``MKPY_CHECK=1``),
each in a worker process, so a crash or a hang is a result rather than the end of the run. Where
``mx.cuda.is_available()``, the CUDA back-end on the GPU (``--gpu``, a real warp as the reference
for the SIMD-group functions) is one more; without a GPU, a fourth worker compiles every kernel
for CUDA sm_80 with NVRTC too (``--nvrtc``), so the CUDA target's translation is checked anyway.
``--compact`` adds the lockstep engine with its compact run function for every kernel
(``MKPY_CBS_COMPACT=1``; normally only past the per-site form's compile budget); setting
``MKPY_CBS_COMPACT=1`` for the whole run instead makes the ``lockstep`` worker build it.

Several kernels share one compile: a batch is one kernel whose bodies are the cases of a
``switch`` on an input, launched once per body.

Command line: ``python tests/kernel_fuzz.py --seconds 600 [--seed N] [--kernels N] [--jobs N]``
(``make fuzz-engine``). A failure is reduced and printed as a regression case for
tests/data/fuzz_regressions.json. ``--jobs N`` runs N processes, each with a seed derived from
the run's seed (all printed at the start; a job's seed replays it alone) and a kernel cache of
its own; their lines are prefixed ``[job J]`` and one summary counts them all. Ctrl-C (or
SIGTERM) stops a run with its counts printed.
"""
import argparse
import json
import os
import pickle
import random
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_NT = 256  # threads per threadgroup (the threadgroup array's length)
NDATA = 64    # elements of the `data` input

# --------------------------------------------------------------------------- the grammar

# leaves: (text, level)
ATTR_LEAVES = [
    ("tid", 2), ("lane", 2), ("gid", 2), ("NT", 0),
    ("thread_position_in_grid.x", 2), ("thread_position_in_grid.y", 2), ("thread_position_in_grid.z", 2),
    ("thread_position_in_threadgroup.x", 2), ("thread_position_in_threadgroup.y", 2),
    ("thread_position_in_threadgroup.z", 2),
    ("threadgroup_position_in_grid.x", 0), ("threadgroup_position_in_grid.y", 0),
    ("threadgroup_position_in_grid.z", 0),
    ("threads_per_threadgroup.x", 0), ("threads_per_threadgroup.y", 0), ("threads_per_threadgroup.z", 0),
    ("threads_per_grid.x", 0), ("threads_per_grid.y", 0), ("threadgroups_per_grid.x", 0),
    ("threadgroups_per_grid.y", 0), ("simdgroup_index_in_threadgroup", 1), ("simdgroups_per_threadgroup", 0),
    ("thread_execution_width", 0), ("quadgroup_index_in_threadgroup", 2), ("thread_index_in_quadgroup", 2),
    ("threads_per_simdgroup", 0),
]
BINOPS = ["+", "-", "*", "^", "&", "|", "<<", ">>", "/", "%", "min", "max"]
CMPOPS = ["<", "<=", ">", ">=", "==", "!="]
REDUCE = ["sum", "product", "min", "max", "and", "or", "xor"]
PREFIX = ["prefix_inclusive_sum", "prefix_exclusive_sum", "prefix_inclusive_product", "prefix_exclusive_product"]
TAKE = ["shuffle", "broadcast", "shuffle_up", "shuffle_down", "shuffle_xor", "shuffle_rotate_up",
        "shuffle_rotate_down"]


def expr_level(e, levels):
    k = e[0]
    if k == "c" or k == "tk":
        return 0
    if k == "leaf":
        return e[2]
    if k == "v":
        return levels[e[1]]
    if k in ("tgs", "atomr"):
        return 0
    if k == "tgown":
        return 2
    return max([expr_level(x, levels) for x in e[2:] if isinstance(x, tuple)] + [0])


def render_expr(e):
    k = e[0]
    if k == "c":
        return "%du" % e[1]
    if k == "tk":
        return "uint(K)"
    if k == "leaf":
        return e[1]
    if k == "v":
        return e[1]
    if k == "tgs":
        return "tgs"
    if k == "atomr":
        return "atomic_load_explicit(&tat, memory_order_relaxed)"
    if k == "tgown":
        return "tga[tid]"
    if k == "bin":
        op, a, b = e[1], render_expr(e[2]), render_expr(e[3])
        if op in ("min", "max"):
            return "%s(%s, %s)" % (op, a, b)
        if op in ("<<", ">>"):
            return "(%s %s (%s & 31u))" % (a, op, b)
        if op in ("/", "%"):
            return "(%s %s (%s | 1u))" % (a, op, b)
        return "(%s %s %s)" % (a, op, b)
    if k == "cmp":
        return "uint(%s %s %s)" % (render_expr(e[2]), e[1], render_expr(e[3]))
    if k == "sel":
        return "(%s != 0u ? %s : %s)" % (render_expr(e[2]), render_expr(e[3]), render_expr(e[4]))
    if k == "in":
        return "data[%s & %du]" % (render_expr(e[2]), NDATA - 1)
    if k == "tgr":
        return "tga[%s %% NT]" % render_expr(e[2])
    if k == "tcast":
        return "uint(T(%s))" % render_expr(e[2])
    if k == "call":
        return "%s(%s)" % (e[1], ", ".join(render_expr(x) for x in e[2:]))
    raise ValueError(e)


def render_simd(fn, args):
    """A SIMD-group or quad-group function call as a uint expression."""
    a = [render_expr(x) for x in args]
    p, name, ty = fn  # prefix ("simd"/"quad"), function, value type
    full = "%s_%s" % (p, name)
    w = 32 if p == "simd" else 4

    def val(x):
        if ty == "uint":
            return x
        if ty == "int":
            return "(int(%s & 65535u) - 32768)" % x
        if "product" in name:
            return "float((%s & 1u) + 1u)" % x
        return "float(%s & 1023u)" % x

    def back(x):
        if ty == "float" and "product" in name:
            return "uint(ulong(%s))" % x
        return "uint(%s)" % x

    if name in REDUCE or name in PREFIX or name == "broadcast_first":
        return back("%s(%s)" % (full, val(a[0])))
    if name in TAKE:
        return back("%s(%s, ushort(%s & %du))" % (full, val(a[0]), a[1], w - 1))
    if name in ("shuffle_and_fill_up", "shuffle_and_fill_down"):
        mod = args[2][1]
        return back("%s(%s, %s, ushort(%s %% %du), ushort(%du))" % (full, val(a[0]), val(a[1]), a[3], mod, mod))
    if name in ("all", "any"):
        return "uint(%s(%s != 0u))" % (full, a[0])
    if name == "is_first":
        return "uint(%s())" % full
    if name == "ballot":
        return "uint(static_cast<%s_vote::vote_t>(%s(%s != 0u)))" % (p, full, a[0])
    if name == "active_threads_mask":
        return "uint(static_cast<%s_vote::vote_t>(%s()))" % (p, full)
    raise ValueError(fn)


def mixed_iterations():
    """SIMD-group functions where the active lanes could come from two loop iterations (under a
    per-thread if in a loop, after a per-thread continue, in a per-thread loop in a loop): off
    unless asked for (the module docstring's rule)."""
    return os.environ.get("MKPY_FUZZ_MIXED_ITERATIONS") == "1"


class Gen:
    """Generates one kernel body (a list of statements) for one launch shape."""

    def __init__(self, rng, nt, uid, size=1.0):
        self.r = rng
        self.mixed = mixed_iterations()
        self.nt = nt
        self.uid = uid
        self.size = size
        self.levels = {"acc": 2}
        self.helpers = []  # header text
        self.nvar = 0
        self.nhelp = 0
        self.nstmt = 0
        self.budget = int(rng.randint(4, 18) * size)

    # ---- expressions
    def leaf(self, maxlvl, scope):
        r = self.r
        opts = []
        for _ in range(3):
            c = r.random()
            if c < 0.3:
                vs = [v for v in scope if self.levels[v] <= maxlvl]
                if vs:
                    opts.append(("v", r.choice(vs)))
                    continue
            if c < 0.55:
                t, lv = r.choice(ATTR_LEAVES)
                if lv <= maxlvl:
                    opts.append(("leaf", t, lv))
                    continue
            if c < 0.62:
                opts.append(("tk",))
                continue
            opts.append(("c", r.choice([0, 1, 2, 3, 5, 7, 16, 31, 32, 33, 64, 255, r.randrange(1 << 32)])))
        return r.choice(opts)

    def expr(self, maxlvl, scope, depth=0, tg=None):
        r = self.r
        if depth > 3 or r.random() < 0.35:
            return self.leaf(maxlvl, scope)
        c = r.random()
        if c < 0.45:
            return ("bin", r.choice(BINOPS), self.expr(maxlvl, scope, depth + 1, tg), self.expr(maxlvl, scope, depth + 1, tg))
        if c < 0.55:
            return ("cmp", r.choice(CMPOPS), self.expr(maxlvl, scope, depth + 1, tg), self.expr(maxlvl, scope, depth + 1, tg))
        if c < 0.62:
            return ("sel", "", self.expr(maxlvl, scope, depth + 1, tg), self.expr(maxlvl, scope, depth + 1, tg),
                    self.expr(maxlvl, scope, depth + 1, tg))
        if c < 0.72:
            return ("in", "", self.expr(maxlvl, scope, depth + 1, tg))
        if c < 0.76:
            return ("tcast", "", self.expr(maxlvl, scope, depth + 1, tg))
        if c < 0.84 and tg is not None:
            # threadgroup memory reads, as the phase allows
            if maxlvl >= 2 and r.random() < 0.3:
                return ("tgown",)
            if "w" not in tg["a"]:
                ix = self.expr(maxlvl, scope, depth + 1, None)
                tg["a"].add("r")
                return ("tgr", "", ix)
            if "w" not in tg["s"]:
                tg["s"].add("r")
                return ("tgs",)
            if not tg["at"]:
                tg["at"].add("r")
                return ("atomr",)
            return self.leaf(maxlvl, scope)
        if c < 0.87 and self.nhelp < 4:
            name = self.pure_helper()
            return ("call", name, self.expr(maxlvl, scope, depth + 1, tg), self.expr(maxlvl, scope, depth + 1, tg))
        return self.leaf(maxlvl, scope)

    def pure_helper(self):
        r = self.r
        name = "h%d_%d" % (self.uid, self.nhelp)
        self.nhelp += 1
        a, b = ("a", 0), ("b", 0)
        body = self.expr_of_params(3)
        self.helpers.append("template <typename U>\nU %s(U a, U b) {\n    return U(%s);\n}\n" % (name, body))
        return name + "<uint>"

    def expr_of_params(self, depth):
        r = self.r
        if depth == 0 or r.random() < 0.3:
            return r.choice(["a", "b", "U(%d)" % r.randrange(64)])
        op = r.choice(["+", "-", "*", "^", "&", "|"])
        return "(%s %s %s)" % (self.expr_of_params(depth - 1), op, self.expr_of_params(depth - 1))

    # ---- statements
    def new_var(self, lvl):
        name = "v%d" % self.nvar
        self.nvar += 1
        self.levels[name] = lvl
        return name

    def block(self, ctx, scope, tg, depth):
        out = []
        n = self.r.randint(1, 5)
        scope = list(scope)
        ctx = dict(ctx)
        for _ in range(n):
            if self.nstmt >= self.budget:
                break
            s = self.stmt(ctx, scope, tg, depth)
            if s is None:
                continue
            out.append(s)
            if s[0] == "decl":
                scope.append(s[1])
            if s[0] == "if" and s[-1] == "cont_div":
                ctx["nosite"] = True
        return out

    def site_ok(self, ctx):
        return not ctx["nosite"]

    def stmt(self, ctx, scope, tg, depth):
        r = self.r
        self.nstmt += 1
        lvl = ctx["level"]
        c = r.random()
        if c < 0.16:  # declaration
            vl = r.choice([lvl, lvl, 2, max(lvl, 1)])
            e = self.expr(vl, scope, 0, tg)
            return ("decl", self.new_var(vl), vl, e)
        if c < 0.30:  # assignment
            vs = [v for v in scope if self.levels[v] >= lvl and not v.startswith("i")]
            if not vs:
                return ("mix", self.expr(2, scope, 0, tg))
            v = r.choice(vs)
            return ("assign", v, r.choice(["=", "+=", "^=", "*="]), self.expr(self.levels[v], scope, 0, tg))
        if c < 0.40:
            return ("mix", self.expr(2, scope, 0, tg))
        if c < 0.55 and depth < 3:  # if / else
            cl = r.choice([0, 0, 1, 2, 2])
            cl = max(cl, lvl)
            cond = self.expr(cl, scope, 0, tg)
            cl = max(expr_level(cond, self.levels), lvl)
            inner = dict(ctx, level=cl)
            if cl == 2 and ctx["loops"] and not self.mixed:
                inner["nosite"] = True
            # the else side continues from the then side's phase: under a divergent condition the
            # two sides run on different threads of the same barrier interval, so a write on one side
            # and a read of another thread's element on the other would race (the fuzzer's own
            # seed 777 generated such a kernel, which the checker rightly reported)
            # (but a then side with a barrier has a threadgroup-uniform condition, and closed the
            # phase only on its own path: then the else side starts from the phase before the if;
            # seed 494878968 batch 171 made a racy kernel when it started after that barrier)
            tgt = {k: set(v) for k, v in tg.items()}
            then = self.block(inner, scope, tgt, depth + 1)
            tge = {k: set(v) for k, v in (tg if any(self.has_barrier(x) for x in then) else tgt).items()}
            els = self.block(inner, scope, tge, depth + 1) if r.random() < 0.4 else []
            for k in tg:
                tg[k] |= tgt[k] | tge[k]
            return ("if", cond, then, els)
        if c < 0.64 and depth < 3:  # loop
            ll = max(lvl, r.choice([0, 0, 1, 2]))
            bound = ("bin", "+", ("bin", "%", self.expr(ll, scope, 1, None), ("c", 4)), ("c", 1))
            # `%` renders with an odd divisor: (x % (4 | 1)) + 1, so 1..5 iterations
            ll = max(ll, expr_level(bound, self.levels))
            iv = "i%d" % self.nvar
            self.nvar += 1
            self.levels[iv] = ll
            inner = dict(ctx, level=ll, loops=ctx["loops"] + [ll])
            if ll == 2 and ctx["loops"] and not self.mixed:
                inner["nosite"] = True
            body = self.block(inner, scope + [iv], tg, depth + 1)
            # an early exit, at the loop's own level (not in a loop with a barrier: the exit
            # would skip the barrier that closes the iteration's phase)
            if r.random() < 0.5 and not any(self.has_barrier(s) for s in body):
                cond = self.expr(ll, scope + [iv], 0, None)
                kind = r.choice(["break", "continue"])
                pos = r.randint(0, len(body))
                divergent = kind == "continue" and expr_level(cond, self.levels) >= 2
                flag = "cont_div" if divergent and not self.mixed else ""
                body.insert(pos, ("if", cond, [(kind,)], [], flag))
                if flag and any(self.has_site(s) for s in body[pos + 1:]):
                    # a lane that continued could meet the others at a later site in its next
                    # iteration: drop the exit instead
                    body.pop(pos)
            if ll == 0 and any(self.has_barrier(s) for s in body):
                body.append(("barrier", "tg"))
                for k in tg:
                    tg[k].clear()
            return ("for", iv, bound, body)
        if c < 0.72:  # threadgroup memory write
            k = r.random()
            if k < 0.5 and "r" not in tg["a"]:
                tg["a"].add("w")
                return ("tgw", self.expr(2, scope, 0, None))
            if k < 0.75 and "r" not in tg["s"]:
                tg["s"].add("w")
                return ("tgsw", self.expr(2, scope, 0, None))
            op = r.choice(["add", "or", "and", "xor", "min", "max", "sub"])
            if "r" not in tg["at"] and tg["at"] <= {op}:
                tg["at"].add(op)
                return ("atom", op, self.expr(2, scope, 0, None))
            return ("mix", self.expr(2, scope, 0, tg))
        if c < 0.80:  # barriers
            if lvl == 0 and all(l == 0 for l in ctx["loops"]) and self.site_ok(ctx):
                for k in tg:
                    tg[k].clear()
                if r.random() < 0.2:
                    name = "hb%d_%d" % (self.uid, self.nhelp)
                    self.nhelp += 1
                    self.helpers.append("inline void %s() {\n    threadgroup_barrier(mem_flags::mem_threadgroup);\n}\n" % name)
                    return ("barrier", "call:" + name)
                return ("barrier", "tg")
            if lvl <= 1 and self.site_ok(ctx):
                return ("barrier", "simd")
            return ("mix", self.expr(2, scope, 0, tg))
        # SIMD-group and quad-group functions
        if not self.site_ok(ctx):
            return ("mix", self.expr(2, scope, 0, tg))
        return self.simd_stmt(ctx, scope, tg)

    def simd_stmt(self, ctx, scope, tg):
        r = self.r
        lvl = ctx["level"]
        p = r.choice(["simd", "simd", "quad"])
        full = (self.nt % 32 == 0) if p == "simd" else (self.nt % 4 == 0)
        kinds = ["reduce", "prefix", "first", "vote", "mask", "isfirst"]
        if full and lvl <= 1:
            kinds += ["take", "take", "fill"]
        kind = r.choice(kinds)
        ty = "uint"
        if kind == "reduce":
            name = r.choice(REDUCE)
            ty = r.choice(["uint", "uint", "int", "float"]) if name not in ("and", "or", "xor") else "uint"
            if ty == "int" and name == "product":
                ty = "uint"
            args = [self.expr(2, scope, 0, tg)]
            rl = 1 if p == "simd" else 2
        elif kind == "prefix":
            name = r.choice(PREFIX)
            ty = r.choice(["uint", "float"] + ([] if "product" in name else ["int"]))
            args = [self.expr(2, scope, 0, tg)]
            rl = 2
        elif kind == "first":
            name = "broadcast_first"
            ty = r.choice(["uint", "float", "int"])
            args = [self.expr(2, scope, 0, tg)]
            rl = 1 if p == "simd" else 2
        elif kind == "vote":
            name = r.choice(["all", "any", "ballot"])
            args = [self.expr(2, scope, 0, tg)]
            rl = 1 if p == "simd" else 2
        elif kind == "mask":
            name = "active_threads_mask"
            args = []
            rl = 1 if p == "simd" else 2
        elif kind == "isfirst":
            name = "is_first"
            args = []
            rl = 2
        elif kind == "take":
            name = r.choice(TAKE)
            ty = r.choice(["uint", "float", "int"])
            args = [self.expr(2, scope, 0, tg), self.expr(1, scope, 0, None)]
            rl = 1 if name == "broadcast" and p == "simd" else 2
        else:
            name = r.choice(["shuffle_and_fill_up", "shuffle_and_fill_down"])
            ty = r.choice(["uint", "float", "int"])
            mod = r.choice([4, 8, 16, 32] if p == "simd" else [2, 4])
            args = [self.expr(2, scope, 0, tg), self.expr(2, scope, 0, tg), ("c", mod), self.expr(1, scope, 0, None)]
            rl = 2
        rl = max(rl, lvl)
        fn = (p, name, ty)
        if r.random() < 0.15:
            # the call inside a helper of the header (its own helper: each call site once)
            hname = "hs%d_%d" % (self.uid, self.nhelp)
            self.nhelp += 1
            params = ", ".join("uint p%d" % i for i in range(len(args)))
            pargs = [("leaf", "p%d" % i, 0) if a[0] != "c" else a for i, a in enumerate(args)]
            self.helpers.append("inline uint %s(%s) {\n    return %s;\n}\n" % (hname, params, render_simd(fn, pargs)))
            return ("simdcall", self.new_var(rl), rl, hname, args)
        return ("simd", self.new_var(rl), rl, fn, args)

    def has_site(self, s):
        k = s[0]
        if k in ("simd", "simdcall", "barrier"):
            return True
        if k == "if":
            return any(self.has_site(x) for x in s[2] + s[3])
        if k == "for":
            return any(self.has_site(x) for x in s[3])
        return False

    def has_barrier(self, s):
        k = s[0]
        if k == "barrier" and s[1] != "simd":
            return True
        if k == "if":
            return any(self.has_barrier(x) for x in s[2] + s[3])
        if k == "for":
            return any(self.has_barrier(x) for x in s[3])
        return False

    def body(self):
        tg = {"a": set(), "s": set(), "at": set()}
        ctx = {"level": 0, "loops": [], "nosite": False}
        out = []
        while self.nstmt < self.budget:
            out += self.block(ctx, [v for s in out if s[0] == "decl" for v in [s[1]]], tg, 0)
        return out


def render_stmts(stmts, ind, lines, levels=None):
    pad = "    " * ind
    for s in stmts:
        k = s[0]
        if k == "decl":
            lines.append("%suint %s = %s;" % (pad, s[1], render_expr(s[3])))
        elif k == "assign":
            lines.append("%s%s %s %s;" % (pad, s[1], s[2], render_expr(s[3])))
        elif k == "mix":
            lines.append("%sacc = acc * 31u + %s;" % (pad, render_expr(s[1])))
        elif k == "if":
            lines.append("%sif (%s != 0u) {" % (pad, render_expr(s[1])))
            render_stmts(s[2], ind + 1, lines)
            if s[3]:
                lines.append("%s} else {" % pad)
                render_stmts(s[3], ind + 1, lines)
            lines.append("%s}" % pad)
        elif k == "for":
            lines.append("%sfor (uint %s = 0u; %s < %s; ++%s) {" % (pad, s[1], s[1], render_expr(s[2]), s[1]))
            render_stmts(s[3], ind + 1, lines)
            lines.append("%s}" % pad)
        elif k in ("break", "continue"):
            lines.append("%s%s;" % (pad, k))
        elif k == "barrier":
            if s[1] == "tg":
                lines.append("%sthreadgroup_barrier(mem_flags::mem_threadgroup);" % pad)
            elif s[1] == "simd":
                lines.append("%ssimdgroup_barrier(mem_flags::mem_threadgroup);" % pad)
            else:
                lines.append("%s%s();" % (pad, s[1][5:]))
        elif k == "tgw":
            lines.append("%stga[tid] = %s;" % (pad, render_expr(s[1])))
        elif k == "tgsw":
            lines.append("%sif (tid == 0u) tgs = %s;" % (pad, render_expr(s[1])))
        elif k == "atom":
            lines.append("%satomic_fetch_%s_explicit(&tat, %s, memory_order_relaxed);" % (pad, s[1], render_expr(s[2])))
        elif k == "simd":
            lines.append("%suint %s = %s;" % (pad, s[1], render_simd(s[3], s[4])))
            lines.append("%sacc = acc * 31u + %s;" % (pad, s[1]))
        elif k == "simdcall":
            lines.append("%suint %s = %s(%s);" % (pad, s[1], s[3], ", ".join(render_expr(a) for a in s[4])))
            lines.append("%sacc = acc * 31u + %s;" % (pad, s[1]))
        else:
            raise ValueError(s)


def decls_in(stmts):
    return [s[1] for s in stmts if s[0] in ("decl", "simd", "simdcall")]


PROLOGUE = """uint tid = thread_index_in_threadgroup;
uint lane = thread_index_in_simdgroup;
uint NT = threads_per_threadgroup.x * threads_per_threadgroup.y * threads_per_threadgroup.z;
uint gid = (thread_position_in_grid.z * threads_per_grid.y + thread_position_in_grid.y) * threads_per_grid.x + thread_position_in_grid.x;
uint acc = 0u;
tga[tid] = data[tid & 63u] ^ tid;
if (tid == 0u) {
    tgs = 7u;
    atomic_store_explicit(&tat, 0u, memory_order_relaxed);
}
threadgroup_barrier(mem_flags::mem_threadgroup);"""

KERNEL_TOP = """threadgroup uint tga[%d];
threadgroup uint tgs;
threadgroup atomic_uint tat;
""" % MAX_NT


def render_case_body(stmts):
    lines = PROLOGUE.split("\n")
    render_stmts(stmts, 0, lines)
    fin = "acc"
    for v in decls_in(stmts):
        fin = "(%s * 0x9e3779b1u) ^ %s" % (fin, v)
    lines.append("out[gid] = %s ^ (tga[tid] * 3u);" % fin)
    return lines


def render_kernel(cases):
    """cases: list of statement lists. Returns the source (a switch on sel[0] when several)."""
    src = [KERNEL_TOP.rstrip("\n")]
    if len(cases) == 1:
        src += render_case_body(cases[0])
    else:
        src.append("switch (sel[0]) {")
        for i, c in enumerate(cases):
            src.append("case %du: {" % i)
            src += ["    " + line for line in render_case_body(c)]
            src.append("    break;")
            src.append("}")
        src.append("}")
    return "\n".join(src) + "\n"


# --------------------------------------------------------------------------- cases and batches

TG_X = [1, 2, 3, 4, 7, 8, 16, 24, 32, 33, 48, 64, 96, 128, 256]


class Case:
    """One generated kernel body with its launch."""

    def __init__(self, stmts, helpers, tg, ngroups, data, k, t):
        self.stmts, self.helpers, self.tg, self.ngroups, self.data, self.k, self.t = stmts, helpers, tg, ngroups, data, k, t

    @property
    def nt(self):
        return self.tg[0] * self.tg[1] * self.tg[2]

    def grid(self):
        return tuple(self.tg[i] * self.ngroups[i] for i in range(3))

    def to_json(self):
        return {"stmts": self.stmts, "helpers": self.helpers, "tg": list(self.tg), "ngroups": list(self.ngroups),
                "data": self.data, "K": self.k, "T": self.t}

    @staticmethod
    def from_json(d):
        def tup(x):
            return tuple(tup(y) for y in x) if isinstance(x, list) else x

        def stmts(xs):
            out = []
            for s in xs:
                s = list(s)
                if s[0] == "if":
                    s = ["if", tup(s[1]), stmts(s[2]), stmts(s[3])] + s[4:]
                elif s[0] == "for":
                    s = ["for", s[1], tup(s[2]), stmts(s[3])]
                elif s[0] in ("simd", "simdcall"):
                    s = [s[0], s[1], s[2], tup(s[3]) if isinstance(s[3], list) else s[3], [tup(a) for a in s[4]]]
                else:
                    s = [tup(x) for x in s]
                out.append(tuple(s))
            return out

        return Case(stmts(d["stmts"]), d["helpers"], tuple(d["tg"]), tuple(d["ngroups"]), d["data"], d["K"], d["T"])


def gen_case(rng, uid, size=1.0):
    while True:
        x = rng.choice(TG_X)
        y = rng.choice([1, 1, 1, 2, 3, 4])
        z = rng.choice([1, 1, 1, 2])
        if x * y * z <= MAX_NT:
            break
    ngroups = (rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2]), 1)
    g = Gen(rng, x * y * z, uid, size)
    stmts = g.body()
    data = [rng.randrange(1 << 32) if rng.random() < 0.5 else rng.randrange(40) for _ in range(NDATA)]
    return Case(stmts, g.helpers, (x, y, z), ngroups, data, rng.randrange(8), rng.choice(["uint32", "uint16"]))


def batch_of(cases):
    """One compile for several cases: their bodies in one switch, one launch per case. The
    template arguments are the first case's (every case of a batch shares them)."""
    header = "\n".join(h for c in cases for h in c.helpers)
    source = render_kernel([c.stmts for c in cases])
    launches = []
    for i, c in enumerate(cases):
        n = 1
        for d in c.grid():
            n *= d
        launches.append({"sel": i, "data": c.data, "grid": c.grid(), "tg": c.tg, "n": n})
    return {"header": header, "source": source, "K": cases[0].k, "T": cases[0].t, "launches": launches,
            "single": len(cases) == 1}


def kernel_text(case):
    b = batch_of([case])
    return b["header"], b["source"]


# --------------------------------------------------------------------------- engines

def worker_main():
    """A worker process: reads pickled batches on stdin, answers one result list per batch.
    MKPY_FUZZ_DEVICE=gpu: the GPU engine, which checks before each batch that the CUDA back-end is
    still there (after a fault CUDA refuses the process's context and GPU streams would quietly run
    on the CPU) and ends after any error, so that the next batch starts with a fresh context."""
    import numpy as np

    import mkpy as mx

    gpu = os.environ.get("MKPY_FUZZ_DEVICE") == "gpu"
    inp, outp = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    cache = {}
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        b = pickle.loads(inp.read(n))
        res = []
        if gpu and not mx.cuda.is_available():
            res = [("error", "the GPU is not available in this worker")] * len(b["launches"])
        else:
            key = (b["header"], b["source"], b["single"])
            k = cache.get(key)
            if k is None:
                k = mx.fast.metal_kernel(name="fz", input_names=["data"] if b["single"] else ["data", "sel"],
                                         output_names=["out"], source=b["source"], header=b["header"])
                cache.clear()
                cache[key] = k
            tdt = getattr(mx, b["T"])
        for L in b["launches"] if not res else []:
            try:
                ins = [mx.array(np.array(L["data"], dtype=np.uint32))]
                if not b["single"]:
                    ins.append(mx.array(np.array([L["sel"]], dtype=np.uint32)))
                # metal_kernel runs on GPU streams only (as MLX's); the CPU engines' workers have
                # MKPY_GPU=cpu, so there the GPU stream is the CPU back-end's
                o, = k(inputs=ins, template=[("K", b["K"]), ("T", tdt)], grid=L["grid"], threadgroup=L["tg"],
                       output_shapes=[(L["n"],)], output_dtypes=[mx.uint32], stream=mx.gpu)
                res.append(("ok", np.array(o).tobytes()))
            except Exception as e:  # noqa: BLE001 - every failure is a result to compare
                res.append(("error", "%s: %s" % (type(e).__name__, str(e)[:2000])))
        data = pickle.dumps(res)
        outp.write(struct.pack("<Q", len(data)) + data)
        outp.flush()
        if gpu and any(st != "ok" for st, _ in res):
            return


# the environment variables an engine's worker gets only from its Engine (never from the caller's
# environment): they choose the engine
ENGINE_ENV = ("MKPY_CHECK", "MKPY_ENGINE", "MKPY_GPU", "MKPY_CUDA_COMPILE_CHECK", "MKPY_FUZZ_DEVICE")


class Engine:
    """A named way to run a batch: ``engine(batch)`` returns one (status, bytes-or-message) per
    launch. This one runs a worker process with extra environment variables. `restart`: the
    worker ends after a batch with an error (the GPU engine's does: a fault spoils its context),
    and the next batch starts a new one."""

    def __init__(self, name, env, timeout=600, restart=False):
        self.name, self.env, self.timeout, self.p, self.restart = name, env, timeout, None, restart

    def start(self):
        env = {k: v for k, v in os.environ.items() if k not in ENGINE_ENV}
        env.update(PYTHONPATH=ROOT, MKPY_KERNEL_TIMEOUT="30", **self.env)
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env, cwd=ROOT)

    def send(self, batch):
        if self.p is None or self.p.poll() is not None:
            self.start()
        data = pickle.dumps(batch)
        try:
            self.p.stdin.write(struct.pack("<Q", len(data)) + data)
            self.p.stdin.flush()
        except OSError:
            self.p = None

    def receive(self, batch):
        import select

        n = len(batch["launches"])
        if self.p is None:
            return [("crash", "worker died")] * n
        r, _, _ = select.select([self.p.stdout], [], [], self.timeout)
        head = self.p.stdout.read(8) if r else b""
        if len(head) < 8:
            self.stop()
            return [("crash", "worker %s" % ("hung" if not r else "crashed"))] * n
        (m,) = struct.unpack("<Q", head)
        res = pickle.loads(self.p.stdout.read(m))
        if self.restart and any(st != "ok" for st, _ in res):
            self.stop()
        return res

    def __call__(self, batch):
        self.send(batch)
        return self.receive(batch)

    def stop(self):
        if self.p is not None:
            try:
                self.p.kill()
                self.p.wait()
            except OSError:
                pass
            self.p = None


PROBE = """
import json, os
import mkpy as mx
gpu = mx.cuda.is_available()
why = None
if not gpu:
    # NVRTC without a GPU (make deps unpacks it into mkpy/_nvrtc): the compile-check mode on a
    # one-line kernel, as tests/conftest.py probes it
    os.environ["MKPY_CUDA_COMPILE_CHECK"] = "sm_80"
    k = mx.fast.metal_kernel(name="nvrtc_probe", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    try:
        mx.eval(k(inputs=[mx.array([1.0])], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                  output_dtypes=[mx.float32])[0])
    except RuntimeError as e:
        why = str(e).splitlines()[0]
print(json.dumps({"gpu": gpu, "nvrtc": gpu or why is None, "why": why}))
"""


def probe_targets():
    """What this machine has besides the CPU: {"gpu": bool, "nvrtc": bool, "why": reason or None}."""
    env = {k: v for k, v in os.environ.items() if k not in ENGINE_ENV}
    try:
        out = subprocess.run([sys.executable, "-c", PROBE], env=dict(env, PYTHONPATH=ROOT), capture_output=True,
                             text=True, timeout=300)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {"gpu": False, "nvrtc": False, "why": "the probe failed"}


def default_engines(gpu=None, nvrtc=None, log=None):
    """The engines to compare: the lockstep engine, the fiber engine and the checker, on the CPU
    back-end (MKPY_GPU=cpu: metal_kernel runs on GPU streams, which would otherwise be the GPU's).
    `gpu` (None: when mkpy finds one): the CUDA back-end on the GPU joins, a real warp being the
    reference for simd_*/quad_* semantics. `nvrtc` (None: when there is no GPU and NVRTC loads):
    a fourth worker, fibers with MKPY_CUDA_COMPILE_CHECK=sm_80, compiles every kernel for the CUDA
    target too, so a kernel NVRTC refuses is a finding even without a GPU."""
    cpu = {"MKPY_GPU": "cpu"}
    engines = [Engine("lockstep", dict(cpu)), Engine("fibers", dict(cpu, MKPY_ENGINE="fibers")),
               Engine("checker", dict(cpu, MKPY_CHECK="1"))]
    if os.environ.get("MKPY_FUZZ_COMPACT") == "1":
        # --compact: the lockstep engine's compact run function (MKPY_CBS_COMPACT) beside its per-site one
        engines.insert(1, Engine("compact", dict(cpu, MKPY_CBS_COMPACT="1")))
    have = probe_targets() if gpu is not False or nvrtc is not False else {"gpu": False, "nvrtc": False}
    if gpu and not have["gpu"]:
        raise RuntimeError("--gpu: mkpy finds no GPU here (mx.cuda.is_available() is False)")
    use_gpu = have["gpu"] if gpu is None else gpu
    if use_gpu:
        engines.append(Engine("cuda", {"MKPY_FUZZ_DEVICE": "gpu"}, restart=True))
    if nvrtc and not have["nvrtc"]:
        raise RuntimeError("--nvrtc: NVRTC cannot compile here: %s" % have.get("why"))
    if nvrtc or (nvrtc is None and not use_gpu and have["nvrtc"]):
        engines.append(Engine("nvrtc", dict(cpu, MKPY_ENGINE="fibers", MKPY_CUDA_COMPILE_CHECK="sm_80")))
    if log:
        log("engines: %s%s" % (", ".join(e.name for e in engines),
                               "" if use_gpu or have.get("nvrtc") or nvrtc is False
                               else " (no CUDA compile check: %s)" % have.get("why")))
    return engines


def run_all(engines, batch):
    for e in engines:
        e.send(batch)
    return {e.name: e.receive(batch) for e in engines}


def against_gpu(results, i):
    """With a GPU engine: which engines differ from the real warp (the reference), as text."""
    if "cuda" not in results:
        return ""
    ref = results["cuda"][i]
    off = [n for n, r in results.items() if n != "cuda" and r[i] != ref]
    return "; %s differ%s from the GPU (the reference)" % (", ".join(off) or "none", "" if len(off) > 1 else "s")


def verdict(results, i):
    """The partition of engines by their answer for launch i: None when all agree with no
    error, else a hashable signature."""
    groups = {}
    for name, res in results.items():
        st, val = res[i]
        key = (st, val) if st == "ok" else (st,)
        groups.setdefault(key, []).append(name)
    if len(groups) == 1 and next(iter(groups))[0] == "ok":
        return None
    return tuple(sorted((tuple(sorted(v)), k[0]) for k, v in groups.items()))


# --------------------------------------------------------------------------- reduction

def count_nodes(stmts):
    n = 0
    for s in stmts:
        n += 1
        if s[0] == "if":
            n += count_nodes(s[2]) + count_nodes(s[3])
        elif s[0] == "for":
            n += count_nodes(s[3])
    return n


def uses(stmts, name):
    text = []
    render_stmts(stmts, 0, text)
    import re

    return any(re.search(r"\b%s\b" % name, t) for t in text)


def stmt_candidates(stmts):
    """Smaller variants of a statement list: one edit each."""
    for i, s in enumerate(stmts):
        rest = stmts[:i] + stmts[i + 1:]
        if s[0] in ("decl", "simd", "simdcall"):
            if not uses(rest, s[1]):
                yield rest
        else:
            yield rest
        if s[0] == "if":
            if s[2] and not any(x[0] in ("break", "continue") for x in s[2]):
                yield stmts[:i] + s[2] + stmts[i + 1:]
            if s[3]:
                yield stmts[:i] + [("if", s[1], s[2], []) + tuple(s[4:])] + stmts[i + 1:]
            for sub in stmt_candidates(s[2]):
                yield stmts[:i] + [("if", s[1], sub, s[3]) + tuple(s[4:])] + stmts[i + 1:]
            for sub in stmt_candidates(s[3]):
                yield stmts[:i] + [("if", s[1], s[2], sub) + tuple(s[4:])] + stmts[i + 1:]
            for e in expr_candidates(s[1]):
                yield stmts[:i] + [("if", e, s[2], s[3]) + tuple(s[4:])] + stmts[i + 1:]
        elif s[0] == "for":
            if not uses(s[3], s[1]) and not any(x[0] == "if" and x[2] and x[2][0][0] in ("break", "continue")
                                                 for x in s[3]):
                yield stmts[:i] + s[3] + stmts[i + 1:]
            for sub in stmt_candidates(s[3]):
                yield stmts[:i] + [("for", s[1], s[2], sub)] + stmts[i + 1:]
            for e in expr_candidates(s[2]):
                yield stmts[:i] + [("for", s[1], e, s[3])] + stmts[i + 1:]
        elif s[0] in ("decl",):
            for e in expr_candidates(s[3]):
                yield stmts[:i] + [("decl", s[1], s[2], e)] + stmts[i + 1:]
        elif s[0] in ("assign",):
            for e in expr_candidates(s[3]):
                yield stmts[:i] + [("assign", s[1], s[2], e)] + stmts[i + 1:]
        elif s[0] in ("mix", "tgw", "tgsw"):
            for e in expr_candidates(s[1]):
                yield stmts[:i] + [(s[0], e)] + stmts[i + 1:]
        elif s[0] == "atom":
            for e in expr_candidates(s[2]):
                yield stmts[:i] + [("atom", s[1], e)] + stmts[i + 1:]
        elif s[0] == "simd":
            for j, a in enumerate(s[4]):
                if a[0] == "c" and s[3][1].startswith("shuffle_and_fill"):
                    continue
                for e in expr_candidates(a):
                    args = list(s[4])
                    args[j] = e
                    yield stmts[:i] + [("simd", s[1], s[2], s[3], args)] + stmts[i + 1:]


def expr_candidates(e):
    """Simpler expressions: a constant, or a sub-expression in its place (never more divergent)."""
    if e[0] == "c":
        if e[1] not in (0, 1):
            yield ("c", 0)
            yield ("c", 1)
        return
    yield ("c", 0)
    yield ("c", 1)
    for j, x in enumerate(e):
        if isinstance(x, tuple) and j >= 2 and e[0] != "call":
            yield x
    for j, x in enumerate(e):
        if isinstance(x, tuple) and j >= 1:
            for y in expr_candidates(x):
                yield e[:j] + (y,) + e[j + 1:]


def reduce_case(case, engines, want, log=print, group=4, max_batches=400):
    """Shrinks case while the engines' verdict stays `want`: C-Reduce's loop over the grammar's
    edits, each round trying `group` candidates in one compile (their bodies in one switch)."""
    import itertools

    batches = 0
    progress = True
    while progress and batches < max_batches:
        progress = False
        cands = list(itertools.islice(stmt_candidates(case.stmts), 2000))
        # the launch shape too: fewer groups first
        for i in range(0, len(cands), group):
            chunk = [Case(c, case.helpers, case.tg, case.ngroups, case.data, case.k, case.t) for c in cands[i:i + group]]
            res = run_all(engines, batch_of(chunk))
            batches += 1
            hit = next((j for j in range(len(chunk)) if verdict(res, j) == want), None)
            if hit is None and any(st == "error" and "compile" in str(v).lower() for r in res.values() for st, v in r):
                # one candidate broke the compile for the whole batch: try them one by one
                for c in chunk:
                    r1 = run_all(engines, batch_of([c]))
                    batches += 1
                    if verdict(r1, 0) == want:
                        hit, chunk = 0, [c]
                        break
            if hit is not None:
                case = chunk[hit]
                log("  reduced to %d statements" % count_nodes(case.stmts))
                progress = True
                break
    # fewer threadgroups and unused helpers
    for ng in [(1, 1, 1)]:
        c = Case(case.stmts, case.helpers, case.tg, ng, case.data, case.k, case.t)
        if ng != case.ngroups and verdict(run_all(engines, batch_of([c])), 0) == want:
            case = c
    hdr = [h for h in case.helpers if h.split("(")[0].split()[-1] in render_kernel([case.stmts])]
    c = Case(case.stmts, hdr, case.tg, case.ngroups, case.data, case.k, case.t)
    if verdict(run_all(engines, batch_of([c])), 0) == want:
        case = c
    return case


# --------------------------------------------------------------------------- the driver

def fuzz(seconds=None, kernels=None, seed=None, per_compile=16, engines=None, log=print, reduce=True,
         stop_on_failure=False, stats=None, gpu=None, nvrtc=None):
    """Runs batches until `seconds` or `kernels` are spent. Returns (kernels run, failures), each
    failure a dict with the case (reduced when `reduce`) and the engines' answers. `stats`, a
    dict, is kept up to date as the run goes (kernels, compiles, failures, seconds), so that an
    interrupted run can still report its counts. `gpu` and `nvrtc`: see default_engines."""
    seed = random.randrange(1 << 31) if seed is None else seed
    rng = random.Random(seed)
    own = engines is None
    engines = engines or default_engines(gpu, nvrtc, log)
    t0 = time.time()
    count, failures, nb = 0, [], 0
    stats = {} if stats is None else stats
    stats.update(kernels=0, compiles=0, failures=failures, seconds=0.0, seed=seed)
    try:
        while True:
            if seconds is not None and time.time() - t0 >= seconds:
                break
            if kernels is not None and count >= kernels:
                break
            cases = [gen_case(rng, j) for j in range(per_compile)]
            # a batch shares the template arguments
            for c in cases[1:]:
                c.k, c.t = cases[0].k, cases[0].t
            batch = batch_of(cases)
            res = run_all(engines, batch)
            nb += 1
            count += len(cases)
            stats.update(kernels=count, compiles=nb, seconds=time.time() - t0)
            for j, c in enumerate(cases):
                v = verdict(res, j)
                if v is None:
                    continue
                log("seed %d batch %d case %d: engines disagree: %s%s" % (seed, nb, j, v, against_gpu(res, j)))
                for name, r in res.items():
                    log("  %s: %s" % (name, r[j][1][:300] if r[j][0] != "ok" else "ok"))
                alone = run_all(engines, batch_of([c]))
                v1 = verdict(alone, 0)
                if v1 is None:
                    log("  (not reproduced alone: kept as found in its batch)")
                    failures.append({"case": c, "verdict": v, "seed": seed})
                    continue
                if reduce:
                    c = reduce_case(c, engines, v1, log=log)
                failures.append({"case": c, "verdict": v1, "seed": seed})
                h, s = kernel_text(c)
                log("reduced kernel (tg %s, groups %s, K=%d, T=%s):\n--- header\n%s--- source\n%s" %
                    (c.tg, c.ngroups, c.k, c.t, h, s))
                log("regression entry: " + json.dumps(c.to_json()))
                if stop_on_failure:
                    return count, failures
            if nb % 5 == 0:
                log("%d kernels in %d compiles, %.0f s, %d failures" % (count, nb, time.time() - t0, len(failures)))
    finally:
        if own:
            for e in engines:
                e.stop()
    return count, failures


REGRESSIONS = os.path.join(ROOT, "tests", "data", "fuzz_regressions.json")


def bless(path):
    """Moves the cases of `path` on which every engine now agrees into the regression file."""
    pending = json.load(open(path))
    reg = json.load(open(REGRESSIONS)) if os.path.exists(REGRESSIONS) else []
    engines = default_engines()
    keep = []
    try:
        for e in pending:
            res = run_all(engines, batch_of([Case.from_json(e["case"])]))
            if verdict(res, 0) is not None:
                print("%s: engines still disagree: %s" % (e["name"], verdict(res, 0)))
                keep.append(e)
                continue
            import numpy as np

            e["expected"] = np.frombuffer(res[engines[0].name][0][1], dtype=np.uint32).tolist()
            reg.append(e)
            print("%s: blessed" % e["name"])
    finally:
        for en in engines:
            en.stop()
    with open(REGRESSIONS, "w") as fh:
        json.dump(reg, fh, indent=1)
    with open(path, "w") as fh:
        json.dump(keep, fh, indent=1)
    return 1 if keep else 0


def job_seed(seed, job):
    """The seed of job `job` of a --jobs run started with `seed` (job 0 of a one-job run keeps it)."""
    return random.Random("kernel fuzz %d job %d" % (seed, job)).randrange(1 << 31)


def failure_json(f):
    return {"case": f["case"].to_json(), "verdict": repr(f["verdict"]), "seed": f["seed"]}


def run_one(a, seed, log):
    """One fuzz process's run (the whole run, or one job of a --jobs run): a summary dict with the
    kernels, compiles, seconds and failures (JSON-ready), also when interrupted."""
    stats = {}
    interrupted = False
    try:
        fuzz(a.seconds, a.kernels, seed, a.per_compile, reduce=not a.no_reduce, log=log, stats=stats, gpu=a.gpu,
             nvrtc=a.nvrtc)
    except KeyboardInterrupt:
        interrupted = True
    return {"seed": seed, "kernels": stats.get("kernels", 0), "compiles": stats.get("compiles", 0),
            "seconds": stats.get("seconds", 0.0), "failures": [failure_json(f) for f in stats.get("failures", [])],
            "interrupted": interrupted}


def run_jobs(a, seed):
    """--jobs N: N processes of this script, each with its own seed (job_seed) and kernel cache
    folder, their output lines prefixed with the job's number; returns their summaries merged."""
    import shutil
    import signal
    import threading

    top = tempfile.mkdtemp(prefix="mkpy-fuzz-jobs-")
    procs, lock = [], threading.Lock()
    env = dict(os.environ)
    # a launch here is at most a few hundred threads: one pool thread per engine worker keeps N jobs
    # from starting N x engines x cores threads
    env.setdefault("MKPY_NUM_THREADS", "1")

    def pump(j, stream):
        for line in iter(stream.readline, ""):
            with lock:
                print("[job %d] %s" % (j, line.rstrip("\n")), flush=True)

    try:
        for j in range(a.jobs):
            s = job_seed(seed, j)
            cmd = [sys.executable, os.path.abspath(__file__), "--seed", str(s), "--per-compile", str(a.per_compile),
                   "--job-result", os.path.join(top, "job%d.json" % j)]
            if a.seconds is not None:
                cmd += ["--seconds", str(a.seconds)]
            if a.kernels is not None:
                cmd += ["--kernels", str(a.kernels // a.jobs + (j < a.kernels % a.jobs))]
            if a.no_reduce:
                cmd.append("--no-reduce")
            for flag in ("gpu", "nvrtc"):
                if getattr(a, flag) is not None:
                    cmd.append("--%s%s" % ("" if getattr(a, flag) else "no-", flag))
            os.makedirs(os.path.join(top, "cache%d" % j))
            # a session of its own: a terminal's Ctrl-C reaches this process only, which passes it on
            # once, and each job then stops and writes what it did
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=dict(env, MKPY_CACHE_DIR=os.path.join(top, "cache%d" % j)),
                                 start_new_session=True)
            t = threading.Thread(target=pump, args=(j, p.stdout), daemon=True)
            t.start()
            procs.append((p, t))
        try:
            for p, t in procs:
                p.wait()
                t.join()
        except KeyboardInterrupt:
            for p, _ in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p, t in procs:
                p.wait()
                t.join()
        out = []
        for j, (p, _) in enumerate(procs):
            path = os.path.join(top, "job%d.json" % j)
            if os.path.exists(path):
                with open(path) as fh:
                    out.append(json.load(fh))
            else:  # the job itself died: that is a finding too
                out.append({"seed": job_seed(seed, j), "kernels": 0, "compiles": 0, "seconds": 0.0,
                            "failures": [{"case": None, "verdict": "job %d exited with %s and no result" %
                                          (j, p.returncode), "seed": job_seed(seed, j)}]})
        return out
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(top, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--kernels", type=int, default=None, help="generated kernels in all (shared among the jobs)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1,
                    help="fuzz processes, each with its own seed (printed; replay one with --seed) and kernel cache")
    ap.add_argument("--job-result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--per-compile", type=int, default=2)
    ap.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=None,
                    help="run every kernel on the GPU too (mkpy's CUDA back-end), the reference for simd_*/quad_* "
                         "(default: when mx.cuda.is_available())")
    ap.add_argument("--nvrtc", action=argparse.BooleanOptionalAction, default=None,
                    help="compile every kernel for CUDA sm_80 with NVRTC too (default: when there is no GPU and NVRTC "
                         "loads)")
    ap.add_argument("--mixed-iterations", action="store_true",
                    help="allow SIMD-group functions where the active lanes could come from two loop iterations "
                         "(sets MKPY_FUZZ_MIXED_ITERATIONS=1 for the jobs and workers; replays need it too)")
    ap.add_argument("--compact", action="store_true",
                    help="one more engine, the lockstep engine with its compact run function for every kernel "
                         "(MKPY_CBS_COMPACT=1; sets MKPY_FUZZ_COMPACT=1 for the jobs; replays need it too)")
    ap.add_argument("--no-reduce", action="store_true")
    ap.add_argument("--save", metavar="FILE", default=None,
                    help="append each reduced failure to FILE (a JSON list) for --bless")
    ap.add_argument("--bless", metavar="FILE", default=None,
                    help="move FILE's cases, once every engine agrees on them, into tests/data/fuzz_regressions.json "
                         "with that answer as the expected one")
    ap.add_argument("--show", type=int, default=None, help="print the kernel of generated case N and exit")
    a = ap.parse_args()
    if a.mixed_iterations:
        os.environ["MKPY_FUZZ_MIXED_ITERATIONS"] = "1"
    if a.compact:
        os.environ["MKPY_FUZZ_COMPACT"] = "1"
    if a.worker:
        return worker_main()
    seed = random.randrange(1 << 31) if a.seed is None else a.seed
    if a.bless:
        return bless(a.bless)
    if a.show is not None:
        c = gen_case(random.Random(seed), 0)
        h, s = kernel_text(c)
        print("// tg %s groups %s\n// header\n%s// source\n%s" % (c.tg, c.ngroups, h, s))
        return 0
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    if a.seconds is None and a.kernels is None:
        a.seconds = 60
    t0 = time.time()
    if a.jobs > 1:
        import signal

        def term(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, term)  # `timeout` and `kill` stop the jobs as Ctrl-C does
        print("kernel fuzz: seed %d, %d jobs (seeds %s)" %
              (seed, a.jobs, " ".join(str(job_seed(seed, j)) for j in range(a.jobs))), flush=True)
        results = run_jobs(a, seed)
    else:
        print("kernel fuzz: seed %d" % seed, flush=True)
        own_cache = None
        if "MKPY_CACHE_DIR" not in os.environ:
            own_cache = os.environ["MKPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="mkpy-fuzz-cache-")
        try:
            results = [run_one(a, seed, lambda m: print(m, flush=True))]
        finally:
            if own_cache:
                import shutil

                shutil.rmtree(own_cache, ignore_errors=True)
        if a.job_result:  # one job of a --jobs run: the parent merges
            with open(a.job_result + ".tmp", "w") as fh:
                json.dump(results[0], fh)
            os.replace(a.job_result + ".tmp", a.job_result)
            return 1 if results[0]["failures"] else 0
    fails = [f for r in results for f in r["failures"]]
    n = sum(r["kernels"] for r in results)
    nc = sum(r["compiles"] for r in results)
    stopped = [r["seed"] for r in results if r.get("interrupted")]
    print("kernel fuzz: %d kernels in %d compiles, %.0f s, %d disagreements (seed %d%s)%s" %
          (n, nc, time.time() - t0, len(fails), seed, ", %d jobs" % a.jobs if a.jobs > 1 else "",
           ", interrupted" if stopped else ""), flush=True)
    for f in fails:
        print("  disagreement at seed %d: %s (replay: python tests/kernel_fuzz.py --seed %d%s%s)" %
              (f["seed"], f["verdict"], f["seed"], " --mixed-iterations" if mixed_iterations() else "",
               " --compact" if os.environ.get("MKPY_FUZZ_COMPACT") == "1" else ""), flush=True)
    if a.save and fails:
        old = json.load(open(a.save)) if os.path.exists(a.save) else []
        for i, f in enumerate(x for x in fails if x["case"] is not None):
            old.append({"name": "seed%d_%d" % (f["seed"], i), "note": "engines disagreed: %s" % f["verdict"],
                        "case": f["case"]})
        with open(a.save, "w") as fh:
            json.dump(old, fh, indent=1)
    return 1 if fails else 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
