"""mkpy benchmark suite: runs every section, prints one table of ratios
measured side by side in this run, writes benchmarks/results.json and, when
matplotlib is importable, benchmarks/results.png.

    make bench                                  (installs optional pieces as root, builds, runs)
    PYTHONPATH=. python3 benchmarks/run_all.py  [--quick] [--only ops,kernels,launch,memory,checker,dist] [--times]

Ratios are "how many times better mkpy is" than the reference (reference
time / mkpy time, or the inverse for throughput and memory): above 1 mkpy
wins. Absolute figures are printed only where a target is absolute.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import fmt_ratio, machine_info  # noqa: E402

SECTIONS = ["ops", "kernels", "launch", "memory", "fftconv", "array", "checker", "dist", "gpu"]


def _met_text(r):
    if r["target"] is None:
        return "-"
    if r["met"] is None:
        return "n/a"
    return "met" if r["met"] else "NOT MET"


def print_table(rows, out=sys.stdout):
    cols = [("section", 8), ("benchmark", 34), ("mkpy", 14), ("reference", 30), ("ratio", 7), ("target", 34),
            ("met", 7)]
    head = "  ".join(n.ljust(w) for n, w in cols) + "  note"
    print(head, file=out)
    print("-" * len(head), file=out)
    last = None
    for r in rows:
        if last is not None and r["section"] != last:
            print(file=out)
        last = r["section"]
        ref = r["ref_name"] + ((" " + r["ref_text"]) if r["ref_text"] else "")
        cells = [r["section"], r["name"], r["value_text"], ref, fmt_ratio(r["ratio"]),
                 r["target"]["text"] if r["target"] else "", _met_text(r)]
        line = "  ".join(str(c).ljust(w) for c, (_, w) in zip(cells, cols))
        print((line + "  " + r["note"]).rstrip(), file=out)
    targeted = [r for r in rows if r["target"]]
    met = sum(1 for r in targeted if r["met"])
    print("-" * len(head), file=out)
    print("ratio = how many times better mkpy is than the reference (>1: mkpy wins). "
          "Targets met: %d of %d." % (met, len(targeted)), file=out)


def print_markdown(rows, out=sys.stdout):
    """The table as Markdown (for docs/performance.md)."""
    print("| section | benchmark | mkpy | reference | ratio | target | met |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for r in rows:
        ref = r["ref_name"] + ((" " + r["ref_text"]) if r["ref_text"] else "")
        met = _met_text(r)
        if met == "NOT MET":
            met = "**not met**"
        cells = [r["section"], r["name"], r["value_text"], ref, fmt_ratio(r["ratio"]),
                 r["target"]["text"] if r["target"] else "", met]
        print("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |", file=out)


def write_png(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not importable: no chart (apt-get install python3-matplotlib)"
    rows = [r for r in rows if r["ratio"] is not None]
    if not rows:
        return "no ratios measured: no chart"
    labels = ["%s vs %s" % (r["name"], r["ref_name"]) for r in rows][::-1]
    ratios = [r["ratio"] for r in rows][::-1]
    colours = [{True: "#2e8b57", False: "#c0392b", None: "#8c8c8c"}[r["met"]] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(11, 0.3 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh(y, ratios, color=colours)
    for i, r in enumerate(rows[::-1]):
        t = r["target"]
        if t and t["ratio_min"]:
            ax.plot([t["ratio_min"]] * 2, [i - 0.4, i + 0.4], color="black", lw=1.5)
        ax.text(r["ratio"], i, " " + fmt_ratio(r["ratio"]), va="center", fontsize=7)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xlabel("times better than the reference (log scale; > 1: mkpy wins)")
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    ax.legend(handles=[Patch(color="#2e8b57", label="target met"), Patch(color="#c0392b", label="target not met"),
                       Patch(color="#8c8c8c", label="no target"),
                       Line2D([], [], color="black", lw=1.5, label="ratio target")],
              loc="lower right", fontsize=7)
    ax.set_title("mkpy benchmarks: ratios measured side by side in one run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "wrote %s" % os.path.relpath(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, SGEMM at 512")
    ap.add_argument("--times", dest="abs_times", action="store_true", help="also print absolute op times")
    ap.add_argument("--json", default=os.path.join(HERE, "results.json"))
    ap.add_argument("--png", default=os.path.join(HERE, "results.png"))
    ap.add_argument("--markdown", metavar="JSON", help="print the table of an earlier run as Markdown; run nothing")
    opts = ap.parse_args(argv)
    if opts.markdown:
        with open(opts.markdown) as f:
            print_markdown(json.load(f)["rows"])
        return 0
    wanted = [s.strip() for s in opts.only.split(",") if s.strip()]
    for s in wanted:
        if s not in SECTIONS:
            ap.error("unknown section %r" % s)

    info = machine_info()
    print("mkpy benchmarks on %s, %s cores%s; load average %s at start" % (
        info["cpu"], info["cores"], " (virtual machine)" if info.get("virtualised") else "",
        " ".join("%.1f" % v for v in info.get("loadavg_start", ()))), flush=True)
    t0 = time.time()
    rows = []
    for s in SECTIONS:
        if s in wanted:
            mod = __import__("bench_" + s)
            rows += mod.run(opts)
    try:
        info["loadavg_end"] = os.getloadavg()
    except OSError:
        pass
    info["wall_s"] = round(time.time() - t0, 1)
    print()
    print_table(rows)
    print("load average at end: %s; %.0f s" % (" ".join("%.1f" % v for v in info.get("loadavg_end", ())),
                                             info["wall_s"]))
    with open(opts.json, "w") as f:
        json.dump({"machine": info, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(opts),
                   "rows": rows}, f, indent=1)
    print("wrote %s" % os.path.relpath(opts.json))
    print(write_png(rows, opts.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
