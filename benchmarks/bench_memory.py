"""Memory: peak resident memory of a chain of 100 element-wise ops on a
4M-element float32 array (16 MB), in a fresh process: ru_maxrss after the
chain minus ru_maxrss just before it (the input already exists), as a
multiple of the array's size. NumPy runs the same chain eagerly.

glibc's heap makes the figure depend on where earlier small allocations
happened to land (large aligned blocks freed in the heap are not always
reusable), so each library runs in several processes whose warm-up differs by
a few small ops; the row reports the worst, the note the range.
Run alone: PYTHONPATH=. python3 benchmarks/bench_memory.py
"""
from common import Target, progress, row, run_child

SECTION = "memory"

CHAIN = Target("< 4x array size", value_max=4.0, strict=True)


def run(opts):
    progress("memory: 100-op chains in fresh processes")
    res, spread = {}, {}
    variants = 3 if opts.quick else 6
    for lib in ("mkpy", "numpy"):
        runs = [run_child("child.py", ["chain-" + lib, str(v)]) for v in range(variants)]
        runs.sort(key=lambda r: r["extra_kib"])
        res[lib] = runs[-1]
        spread[lib] = [r["extra_kib"] / r["array_kib"] for r in runs]
    mk = res["mkpy"]["extra_kib"] / res["mkpy"]["array_kib"]
    npx = res["numpy"]["extra_kib"] / res["numpy"]["array_kib"]
    note = "worst of %d layouts; mkpy %.1fx..%.1fx, numpy %.1fx..%.1fx; " % (
        variants, spread["mkpy"][0], spread["mkpy"][-1], spread["numpy"][0], spread["numpy"][-1])
    for lib in ("mkpy", "numpy"):
        r = res[lib]
        if r["baseline_kib"] - r["rss_at_baseline_kib"] > 1024:
            note += "%s baseline high-water mark above RSS; " % lib
    arr = res["mkpy"]["array_kib"] * 1024.0
    mkpy_own = res["mkpy"].get("mkpy_peak_bytes")
    if mkpy_own is not None:
        # the counter includes the input itself
        note += "mkpy's live-buffer peak beyond the input: %.1fx; " % (mkpy_own / arr - 1)
    mi = res["mkpy"].get("malloc_after")
    if mi:
        note += "worst run's glibc heap after: %.1fx, of it free %.1fx" % (mi["heap"] / arr, mi["free_in_heap"] / arr)
    return [row(SECTION, "100-op chain peak RSS, 4M f32", value=mk, value_text="%.2fx array" % mk,
                ref_name="numpy (eager)", ref_value=npx, ref_text="%.2fx array" % npx,
                ratio=(npx / mk) if mk > 0 else None, target=CHAIN, note=note.strip("; "),
                extra={"mkpy": res["mkpy"], "numpy": res["numpy"], "spread": spread})]


if __name__ == "__main__":
    import run_all
    run_all.main(["--only", SECTION])
