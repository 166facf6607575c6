"""`make soak` (scripts/soak.py) runs by hand for minutes; here a few seconds
of it check that it runs, reports memory over time and finds no error."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_short_soak_reports_memory_and_passes():
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "soak.py"), "--seconds", "3", "--every", "1",
                        "--threads", "4"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["time_s", "rounds", "short", "rss_mib", "maps", "vm_mib", "active_mib", "cache_mib"]
    reports = [l.split() for l in lines[1:] if l.split() and l.split()[0].replace(".", "").isdigit()]
    assert len(reports) >= 2, p.stdout
    assert all(len(r) == 8 and float(r[3]) > 0 and int(r[4]) > 0 for r in reports), p.stdout
    assert lines[-1].startswith("ok: ") and int(lines[-1].split()[1]) > 0, p.stdout
