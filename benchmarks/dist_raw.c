/* Raw MPI for bench_dist.py: loops of MPI_Allreduce / MPI_Allgather from C
 * on the caller's buffers, compiled by the bench (mpicc's flags) into a
 * shared library that the mkpy rank loads with ctypes: same process, same
 * buffers, same MPI world. Each times `reps` calls, each after a barrier,
 * into times[]. */
#include <mpi.h>

void raw_allreduce_f32(const float *in, float *out, int count, int reps, double *times) {
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        times[i] = MPI_Wtime() - t;
    }
}

void raw_allgather_u8(const void *in, void *out, int count, int reps, double *times) {
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Allgather(in, count, MPI_BYTE, out, count, MPI_BYTE, MPI_COMM_WORLD);
        times[i] = MPI_Wtime() - t;
    }
}

void raw_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }
