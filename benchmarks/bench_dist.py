"""mkpy.distributed over Open MPI, 2 ranks on this machine (mpirun -np 2), against raw MPI called
from C in the same processes on the same buffers (benchmarks/dist_raw.c, compiled here with
mpicc's flags and loaded with ctypes):

* all_sum of 64 MB of float32 (bandwidth) vs MPI_Allreduce;
* all_sum of 8 bytes (latency) vs MPI_Allreduce;
* all_gather of 16 MB per rank vs MPI_Allgather;
* a data-parallel MLP step, 2 ranks x 1 core (MKPY_NUM_THREADS=1, mpirun --bind-to core) vs
  1 rank x 1 core on the same total batch (throughput; also by the busiest rank's CPU time,
  which does not depend on what else the machine runs).

Medians of timed calls, each after a barrier. Run alone: PYTHONPATH=. python3 benchmarks/bench_dist.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from common import Target, fmt_time, progress, row

SECTION = "dist"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

BW = Target(">= 0.9x", ratio_min=0.9)
LAT = Target("<= 1.5x raw", ratio_min=1 / 1.5)
SCALE = Target(">= 1.7x", ratio_min=1.7)


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra)
    return env


def _last_json(cmd, env, timeout=600):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), p.returncode, (p.stdout + p.stderr)[-3000:]))
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])


def _skip(why):
    return [row(SECTION, "distributed (Open MPI)", note="not run: " + why)]


def run(opts):
    mpirun, mpicc = shutil.which("mpirun"), shutil.which("mpicc")
    if not mpirun or not mpicc:
        return _skip("mpirun / mpicc missing (make deps installs openmpi-bin, libopenmpi-dev)")
    worker = os.path.join(HERE, "dist_worker.py")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "dist_raw.so")
        subprocess.run([mpicc, "-O2", "-shared", "-fPIC", os.path.join(HERE, "dist_raw.c"), "-o", so], check=True)
        progress("dist: collectives, 2 ranks, vs raw MPI from C")
        res = _last_json([mpirun, "-np", "2", "--oversubscribe", sys.executable, worker, "coll", so], _env())
    mk, raw = res["allsum64"]
    mb = 64 * 2 ** 20
    rows.append(row(SECTION, "all_sum 64 MB float32", value=mb / mk / 1e9, value_text="%.2f GB/s" % (mb / mk / 1e9),
                    ref_name="MPI_Allreduce", ref_value=mb / raw / 1e9, ref_text="%.2f GB/s" % (mb / raw / 1e9),
                    ratio=raw / mk, target=BW))
    mk, raw = res["allsum8"]
    rows.append(row(SECTION, "all_sum 8 B latency", value=mk, value_text=fmt_time(mk), ref_name="MPI_Allreduce",
                    ref_value=raw, ref_text=fmt_time(raw), ratio=raw / mk, target=LAT,
                    note="Python call + lazy node + eval included"))
    mk, raw = res["allgather16"]
    mb = 16 * 2 ** 20
    rows.append(row(SECTION, "all_gather 16 MB/rank", value=mb / mk / 1e9, value_text="%.2f GB/s" % (mb / mk / 1e9),
                    ref_name="MPI_Allgather", ref_value=mb / raw / 1e9, ref_text="%.2f GB/s" % (mb / raw / 1e9),
                    ratio=raw / mk, target=BW))
    steps = "4" if getattr(opts, "quick", False) else "12"
    progress("dist: data-parallel MLP, 2 ranks x 1 core vs 1 rank x 1 core")
    one_core = _env(MKPY_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    two = _last_json([mpirun, "-np", "2", "--bind-to", "core", "--map-by", "core", sys.executable, worker, "mlp",
                      steps], one_core)
    taskset = [shutil.which("taskset"), "-c", "0"] if shutil.which("taskset") else []
    one = _last_json(taskset + [sys.executable, worker, "mlp", steps], one_core)
    load = os.getloadavg()[0]
    rows.append(row(SECTION, "MLP step, 2 ranks x 1 core", value=two["samples_per_s"],
                    value_text="%.0f samples/s" % two["samples_per_s"], ref_name="1 rank x 1 core",
                    ref_value=one["samples_per_s"], ref_text="%.0f samples/s" % one["samples_per_s"],
                    ratio=two["samples_per_s"] / one["samples_per_s"], target=SCALE,
                    note="load %.1f on %d cores; by CPU time %.2fx" % (
                        load, os.cpu_count(), two["cpu_samples_per_s"] / one["cpu_samples_per_s"])))
    return rows


if __name__ == "__main__":
    from run_all import print_table
    print_table(run(None))
