"""python -m mkpy.launch: start an mkpy program on several processes through Open MPI's mpirun.

    python -m mkpy.launch -n 4 train.py --lr 0.1          # 4 ranks on this machine
    python -m mkpy.launch --hostfile hosts.json train.py  # one rank per host entry

The hostfile is mlx.launch's JSON: {"backend": ..., "envs": ["K=V", ...], "hosts": [{"ssh":
"host1", "ips": [...]}, ...]} or just the list of hosts. Each entry is one rank on the host
named by "ssh"; -n N repeats every host N times. Every backend is run over MPI (mkpy's only
multi-process backend). See docs/distributed.md.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

__all__ = ["read_hostfile", "mpirun_command", "main"]


def read_hostfile(path):
    """(hosts, envs, backend) from an mlx.launch JSON hostfile: hosts is the list of ssh host
    names, one per rank. ValueError when the file is missing or malformed."""
    if not os.path.exists(path):
        raise ValueError(f"Hostfile {path} doesn't exist")
    try:
        with open(path) as f:
            data = json.load(f)
        backend, envs = "", []
        if isinstance(data, dict):
            backend = data.get("backend", "")
            envs = list(data.get("envs", []))
            data = data["hosts"]
        if not isinstance(data, list) or not data:
            raise ValueError("no hosts")
        hosts = [h["ssh"] for h in data]
        if not all(isinstance(h, str) and h for h in hosts):
            raise ValueError("every host needs a non-empty \"ssh\" name")
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"Failed to parse hostfile {path} ({e})") from e
    return hosts, envs, backend


def mpirun_command(mpirun, hostfile_path, command, envs=(), mpi_args=(), cwd=None):
    """The mpirun command line that runs `command` once per slot of the Open MPI hostfile."""
    return [mpirun, "--hostfile", hostfile_path, *(["-wdir", cwd] if cwd else []),
            *sum((["-x", e] for e in envs), []), *mpi_args, "--", *command]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mkpy.launch",
                                description="Launch an mkpy distributed program with Open MPI")
    p.add_argument("-n", "--repeat-hosts", type=int, default=1, metavar="N",
                   help="ranks per host (each host repeated N times)")
    p.add_argument("--hosts", default="127.0.0.1", help="comma separated host names (default 127.0.0.1)")
    p.add_argument("--hostfile", help="mlx.launch's JSON hostfile")
    p.add_argument("--backend", help="accepted for mlx.launch's command lines; mkpy always uses MPI")
    p.add_argument("--env", action="append", default=[], help="K=V for every rank")
    p.add_argument("--mpi-arg", action="append", default=[], help="arguments passed to mpirun")
    p.add_argument("--cwd", help="working directory of every rank")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs a .py script")
    p.add_argument("--verbose", action="store_true", help="print the mpirun command")
    args, rest = p.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        p.error("No script is provided")
    if args.repeat_hosts < 1:
        p.error("-n must be a positive number")
    try:
        if args.hostfile:
            hosts, envs, backend = read_hostfile(args.hostfile)
        else:
            hosts, envs, backend = [h for h in args.hosts.split(",")], [], ""
            if not all(hosts):
                raise ValueError("Hostname cannot be empty")
    except ValueError as e:
        p.error(str(e))
    backend = args.backend or backend
    if backend not in (None, "", "mpi", "any"):
        print(f"mkpy.launch: note: backend {backend!r} runs over MPI in mkpy", file=sys.stderr)
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        p.error("mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    command = list(rest)
    if command[0].endswith(".py") or not shutil.which(command[0]):
        command = [args.python, *command]
    slots = Counter()
    for h in hosts:
        slots[h] += args.repeat_hosts
    mpi_args = sum((shlex.split(a) for a in args.mpi_arg), [])
    with tempfile.NamedTemporaryFile("w", prefix="mkpy-hosts-", suffix=".txt") as f:
        for h, n in slots.items():
            print(f"{h} slots={n}", file=f)
        f.flush()
        cmd = mpirun_command(mpirun, f.name, command, envs + args.env, mpi_args, args.cwd)
        if args.verbose:
            print("mkpy.launch:", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        try:
            return subprocess.run(cmd).returncode
        except KeyboardInterrupt:
            return 130


if __name__ == "__main__":
    sys.exit(main())
