"""`python -m mkpy [check]`: the environment check (a PASS/WARN/FAIL line per item, with the
fix for each failure; exit status 1 when something fails).
`python -m mkpy cache [--clear]`: where compiled kernels are cached, how much is there,
and how often processes found their kernel there."""
import argparse
import sys

from . import metal


def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mkpy")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("check", help="check the environment (the default)")
    cache = sub.add_parser("cache", help="show the compiled-kernel cache (--clear empties it)")
    cache.add_argument("--clear", action="store_true", help="remove every cached kernel")
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
