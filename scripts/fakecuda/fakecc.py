# fakecc.py SRC OUT.so [-I...]: compiles one of mkpy's CUDA op-kernel programs for the host with
# clang++ (shim.h stands for the device side) and appends, for each extern "C" kernel NAME, a
# wrapper NAME__fake(void **params, unsigned blocks) that runs the blocks in turn, one thread each
# (mkpy's op kernels loop over their grid, so any grid covers the work), and for each of
# mx.fast.cuda_kernel's, NAME__fake3 (below). scripts/fakecuda/README.
import re, subprocess, sys
src, out = sys.argv[1], sys.argv[2]
incs = [a for a in sys.argv[3:] if a.startswith("-I")]
text = open(src).read()
wr = []


def call_args(params):
    """The arguments of a call from the launch's parameter array p, one per parameter (its type)."""
    out = []
    for i, p in enumerate([p.strip() for p in params.split(",") if p.strip()]):
        out.append("*(%s*)p[%d]" % (re.sub(r'\w+\s*$', '', p).strip(), i))
    return out


for m in re.finditer(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)', text):
    name, args = m.group(1), call_args(m.group(2))
    wr.append('extern "C" void %s__fake(void **p, unsigned gx) { gridDim.x = gx; blockDim.x = 1; threadIdx.x = 0; '
              'for (unsigned b = 0; b < gx; b++) { blockIdx.x = b; %s(%s); } }' % (name, name, ", ".join(args)))
# mx.fast.cuda_kernel's programs (MLX's __global__ function in namespace mlx::core::cu, found through
# nvrtcGetLoweredName, which fakenvrtc answers with mkfake_NAME): NAME__fake3 runs the whole launch,
# every block and every thread of each in turn (no barrier between threads: README)
for m in re.finditer(r'(?<!extern "C" )__global__\s+void\s+(custom_kernel_\w+)\s*\(([^)]*)\)\s*\{', text):
    name, args = m.group(1), call_args(m.group(2))
    wr.append('namespace mlx::core::cu { extern "C" void mkfake_%s__fake3(void **p, unsigned gx, unsigned gy, '
              'unsigned gz, unsigned bx, unsigned by, unsigned bz) { gridDim = {gx, gy, gz}; '
              'blockDim = {bx, by, bz}; for (unsigned z = 0; z < gz; z++) for (unsigned y = 0; y < gy; y++) '
              'for (unsigned x = 0; x < gx; x++) for (unsigned k = 0; k < bz; k++) for (unsigned j = 0; j < by; j++) '
              'for (unsigned i = 0; i < bx; i++) { blockIdx = {x, y, z}; threadIdx = {i, j, k}; %s(%s); } } }'
              % (name, name, ", ".join(args)))
with open(src, "a") as f:
    f.write("\n" + "\n".join(wr) + "\n")
cmd = ["clang++-15", "-std=c++17", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-w", "-x", "c++",
       "-include", __file__.rsplit("/", 1)[0] + "/shim.h"] + incs + [src, "-o", out]
r = subprocess.run(cmd, capture_output=True, text=True)
sys.stderr.write(r.stderr)
sys.exit(r.returncode)
