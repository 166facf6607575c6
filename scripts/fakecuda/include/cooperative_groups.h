// fakecuda's host stand-in for CUDA's cooperative_groups.h (README): the
// grid's and the block's ranks and sizes; sync() does nothing (threads run
// one after another).
#pragma once
namespace cooperative_groups {
struct thread_block {
    unsigned long long thread_rank() const { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
    unsigned long long size() const { return (unsigned long long)blockDim.x * blockDim.y * blockDim.z; }
    unsigned long long num_threads() const { return size(); }
    void sync() const {}
};
struct grid_group {
    unsigned long long block_rank() const { return blockIdx.x + gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z); }
    unsigned long long thread_rank() const { return block_rank() * thread_block().size() + thread_block().thread_rank(); }
    unsigned long long size() const { return (unsigned long long)gridDim.x * gridDim.y * gridDim.z * thread_block().size(); }
    unsigned long long num_threads() const { return size(); }
    void sync() const {}
};
inline grid_group this_grid() { return {}; }
inline thread_block this_thread_block() { return {}; }
} // namespace cooperative_groups
