"""Per-file pass counts of two pytest --junitxml reports (mkpy's run through the stand-in mode,
then MLX's CPU build's), and the tests that pass in one run only. Used by scripts/mlx_suites.sh.
Usage: python3 scripts/junit_compare.py MKPY.xml MLX.xml"""
import sys, collections, xml.etree.ElementTree as ET
def load(p):
    res = {}
    for tc in ET.parse(p).getroot().iter("testcase"):
        cls = tc.get("classname", ""); name = tc.get("name")
        st = "pass"
        for ch in tc:
            if ch.tag in ("failure", "error"): st = ch.tag
            elif ch.tag == "skipped": st = "skip"
        f = next((c for c in cls.split(".") if c.startswith("test_")), cls)
        res[(f, cls, name)] = st
    return res
a, b = load(sys.argv[1]), load(sys.argv[2])   # mkpy, ref
files = sorted({k[0] for k in a} | {k[0] for k in b})
print("%-28s %14s %14s" % ("file", "mkpy pass/run", "MLX pass/run"))
for f in files:
    ka = [k for k in a if k[0] == f]; kb = [k for k in b if k[0] == f]
    pa = sum(a[k] == "pass" for k in ka); pb = sum(b[k] == "pass" for k in kb)
    ra = sum(a[k] != "skip" for k in ka); rb = sum(b[k] != "skip" for k in kb)
    print("%-28s %8d/%-5d %8d/%-5d" % (f, pa, ra, pb, rb))
print("TOTAL", sum(v == "pass" for v in a.values()), sum(v != "skip" for v in a.values()),
      sum(v == "pass" for v in b.values()), sum(v != "skip" for v in b.values()))
print("\nmkpy fails, MLX passes:")
for k in sorted(a):
    if a[k] in ("failure", "error") and b.get(k) == "pass": print("  ", k[1], k[2], a[k])
print("\nMLX fails, mkpy passes:")
for k in sorted(a):
    if a[k] == "pass" and b.get(k) in ("failure", "error"): print("  ", k[1], k[2], b[k])
