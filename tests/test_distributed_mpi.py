"""mkpy.distributed over Open MPI: the checks of tests/mpi/ run under mpirun -np 2 and -np 3 (as
root, as CI: --allow-run-as-root's variables and --oversubscribe), a failing rank, the launcher
with a hostfile, and two "machines" (network namespaces joined by a veth pair, MPI over TCP).
Each mpirun launch batches many checks: mpirun's start-up dominates the time. Skipped, with the
reason, where mpirun or libmpi is missing."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = os.path.join(ROOT, "tests", "mpi", "checks.py")
FAILURE = os.path.join(ROOT, "tests", "mpi", "failure.py")
PY = sys.executable

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None or not mx.distributed.is_available("mpi"),
                                reason="Open MPI (mpirun and libmpi) is not installed: make deps installs it")


def mpi_env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for k in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MKPY_DIST_TIMEOUT", "MKPY_DIST_CHUNK", "MKPY_DIST_INLINE"):
        env.pop(k, None)
    env.update(extra)
    return env


def run(cmd, timeout=120, **env):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=mpi_env(**env), capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def mlx_site():
    """site-packages of a venv with MLX's pure-Python `mlx` (make bench's MLX venv), or None."""
    venv = os.environ.get("MKPY_BENCH_MLX_VENV", os.path.expanduser("~/.cache/mkpy/bench-mlx-venv"))
    for site in glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")):
        if os.path.exists(os.path.join(site, "mlx", "nn", "layers", "distributed.py")):
            return site
    return None


def expect_checks(p, n):
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    counts = re.findall(r"CHECKS rank=(\d+) size=(\d+) passed=(\d+)", p.stdout)
    assert sorted(int(r) for r, _, _ in counts) == list(range(n)), out[-4000:]
    assert all(int(s) == n and int(c) > 0 for _, s, c in counts), out[-4000:]
    return counts


def test_singleton_without_mpirun():
    code = ("import mkpy as mx\nD = mx.distributed\ng = D.init()\nassert (g.rank(), g.size()) == (0, 1)\n"
            "x = mx.arange(4)\nassert D.all_sum(x).tolist() == [0, 1, 2, 3]\n"
            "assert D.sum_scatter(x).tolist() == [0, 1, 2, 3]\n"
            "try:\n    D.init(strict=True, backend='mpi')\nexcept RuntimeError as e:\n"
            "    assert 'single process' in str(e), e\nelse:\n    raise SystemExit('strict init worked')\n"
            "print('SINGLETON-OK')\n")
    p, _ = run([PY, "-c", code], timeout=60)
    assert p.returncode == 0 and "SINGLETON-OK" in p.stdout, p.stdout + p.stderr


def test_two_ranks_through_the_launcher_with_a_hostfile(tmp_path):
    """-np 2 via python -m mkpy.launch and an mlx.launch hostfile (its "envs" reach the ranks);
    MLX's nn layers through the pure-Python mlx package when a venv has it."""
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps({"backend": "mpi", "envs": ["MKPY_DIST_TIMEOUT=60"],
                                    "hosts": [{"ssh": "localhost", "ips": ["127.0.0.1"]}, {"ssh": "localhost"}]}))
    extra = []
    site = mlx_site()
    if site:
        extra = ["--mlx", site]
    else:
        print("MLX's nn layers not checked: no venv with the mlx package (make bench makes one)")
    p, secs = run([PY, "-m", "mkpy.launch", "--hostfile", str(hostfile), CHECKS, *extra])
    expect_checks(p, 2)
    print(f"np=2 through mkpy.launch: {secs:.1f} s")


def test_three_ranks_in_small_chunks():
    """-np 3 (split groups of 2 and 1) with MKPY_DIST_CHUNK=24 bytes: every transfer in pieces,
    and with MKPY_DIST_INLINE=0 every one on the communication thread (evaluations asynchronous)."""
    p, secs = run([MPIRUN, "-np", "3", "--oversubscribe", "--allow-run-as-root", PY, CHECKS], MKPY_DIST_CHUNK="24",
                  MKPY_DIST_INLINE="0")
    expect_checks(p, 3)
    print(f"np=3: {secs:.1f} s")


def keep_going():
    """mpirun's option that lets the other ranks run on when one exits with an error: ORTE's MCA
    parameter up to Open MPI 4 (Debian 12, Ubuntu 24.04), PRRTE's from Open MPI 5 (Debian 13),
    which ignores the old name."""
    out = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True, env=mpi_env()).stdout
    m = re.search(r"Open MPI\)? (\d+)\.", out)
    if m and int(m.group(1)) >= 5:
        return ["--prtemca", "state_base_error_non_zero_exit", "0"]
    return ["--mca", "orte_abort_on_non_zero_status", "0"]


def test_a_rank_that_raises_times_out_the_other():
    """mpirun told not to stop the job: rank 0 gets the timeout error, then refusals."""
    p, secs = run([MPIRUN, "-np", "2", *keep_going(), PY, FAILURE, "raise"], MKPY_DIST_TIMEOUT="2")
    assert "TIMEOUT-OK" in p.stdout, p.stdout + p.stderr
    assert "rank 1 fails on purpose" in p.stderr
    assert secs < 60


def test_a_rank_that_dies_stops_the_job():
    """By default mpirun stops the others when a rank dies (or raises: mkpy then skips
    MPI_Finalize); the 300 s timeout is not waited for."""
    for how in ("kill", "raise"):
        p, secs = run([MPIRUN, "-np", "2", PY, FAILURE, how])
        assert p.returncode != 0 and "TIMEOUT-OK" not in p.stdout, p.stdout + p.stderr
        assert secs < 60, secs


AGENT = """#!/bin/sh
# mpirun's remote shell for the test: "ssh HOST CMD" runs CMD in HOST's namespace
host=$1; shift
case "$host" in
  {ip_b}) ns={ns_b} ;;
  *) ns={ns_a} ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
"""


def test_two_machines_on_one(tmp_path):
    """Data-parallel training across two network namespaces joined by a veth pair: Open MPI
    sees two hosts and talks TCP between their two addresses only."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("network namespaces need root and iproute2 / util-linux")
    tag = f"{os.getpid() % 100000}"
    ns_a, ns_b, va, vb = f"mkpyA{tag}", f"mkpyB{tag}", f"mkva{tag}", f"mkvb{tag}"
    octet = 16 + os.getpid() % 200
    ip_a, ip_b, net = f"10.231.{octet}.1", f"10.231.{octet}.2", f"10.231.{octet}.0/24"

    def sh(*cmd):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)

    made = []
    try:
        steps = [("ip", "netns", "add", ns_a), ("ip", "netns", "add", ns_b),
                 ("ip", "link", "add", va, "type", "veth", "peer", "name", vb),
                 ("ip", "link", "set", va, "netns", ns_a), ("ip", "link", "set", vb, "netns", ns_b),
                 ("ip", "-n", ns_a, "addr", "add", f"{ip_a}/24", "dev", va),
                 ("ip", "-n", ns_b, "addr", "add", f"{ip_b}/24", "dev", vb),
                 ("ip", "-n", ns_a, "link", "set", "lo", "up"), ("ip", "-n", ns_b, "link", "set", "lo", "up"),
                 ("ip", "-n", ns_a, "link", "set", va, "up"), ("ip", "-n", ns_b, "link", "set", vb, "up")]
        for i, step in enumerate(steps):
            r = sh(*step)
            if r.returncode != 0:
                pytest.skip(f"cannot make network namespaces here: {' '.join(step)}: {r.stderr.strip()}")
            if i < 2:
                made.append(step[3])
        agent = tmp_path / "agent.sh"
        agent.write_text(AGENT.format(ip_b=ip_b, ns_a=ns_a, ns_b=ns_b))
        agent.chmod(0o755)
        hostfile = tmp_path / "hosts.json"
        hostfile.write_text(json.dumps({"hosts": [{"ssh": ip_a}, {"ssh": ip_b}]}))
        mca = (f"--mca plm_rsh_agent {agent} --mca oob_tcp_if_include {net} --mca btl tcp,self "
               f"--mca btl_tcp_if_include {net}")
        launch = (f"hostname {ns_a}; {PY} -m mkpy.launch --hostfile {hostfile} --env PYTHONPATH={ROOT} "
                  f"--env OMPI_ALLOW_RUN_AS_ROOT=1 --env OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                  f"--env MKPY_DIST_TIMEOUT=60 --mpi-arg '{mca}' {CHECKS} --training-only")
        p, secs = run(["ip", "netns", "exec", ns_a, "unshare", "--uts", "sh", "-c", launch], timeout=120)
        counts = expect_checks(p, 2)
        # mpirun forwards each rank's output as it comes: a rank's line may end after the other's
        # starts ("host=ACHECKS rank=1 ... host=B"), so a name ends where the next report begins
        hosts = set(re.findall(r"host=(\S+?)(?=CHECKS|\s|$)", p.stdout))
        assert hosts == {ns_a, ns_b}, p.stdout  # one rank in each namespace
        print(f"two namespaces over TCP: {secs:.1f} s, {counts}")
    finally:
        for ns in made:
            sh("ip", "netns", "del", ns)  # takes the veth pair with it
