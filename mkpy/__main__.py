"""`python -m mkpy [check]`: the environment check (a PASS/WARN/FAIL line per item, with the
fix for each failure; exit status 1 when something fails).
`python -m mkpy cache [--clear]`: where compiled kernels are cached, how much is there,
and how often processes found their kernel there.
`python -m mkpy run script.py [args]` / `python -m mkpy run -m module [args]`: runs an MLX program
with mkpy standing in for mlx.core (mkpy.as_mlx)."""
import argparse
import os
import runpy
import sys

from . import metal


def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024


def _run(argv):
    """`run script.py [args]` or `run -m module [args]`, as `python` would run them."""
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print("usage: python -m mkpy run script.py [args] | python -m mkpy run -m module [args]\n\n"
              "Runs an MLX program with mkpy standing in for mlx.core (see mkpy.as_mlx).",
              file=sys.stdout if argv and argv[0] in ("-h", "--help") else sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    from . import as_mlx
    as_mlx.install()
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python script.py`
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        return _run(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m mkpy")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("check", help="check the environment (the default)")
    cache = sub.add_parser("cache", help="show the compiled-kernel cache (--clear empties it)")
    cache.add_argument("--clear", action="store_true", help="remove every cached kernel")
    sub.add_parser("run", help="run script.py [args] (or -m module [args]) with mkpy as mlx.core")
    args = parser.parse_args(argv)
    if args.command in (None, "check"):
        text, failures = metal._env_check()
        print("mkpy environment check")
        print(text, end="")
        print("%d problem%s found" % (failures, "" if failures == 1 else "s") if failures else "all checks passed")
        return 1 if failures else 0

    info = metal._disk_cache(args.clear)
    if args.clear:
        print("cleared %s" % info["dir"])
    lookups = info["hits"] + info["misses"]
    print("location: %s" % info["dir"])
    print("size:     %s (cap %s, MKPY_CACHE_MAX_BYTES)" % (_size(info["bytes"]), _size(info["max_bytes"])))
    print("entries:  %d" % info["entries"])
    print("hit rate: %s (%d hits, %d compiles)" % ("%.1f%%" % (100.0 * info["hits"] / lookups) if lookups else "n/a",
                                                   info["hits"], info["misses"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
