// Just enough of CUDA to run one generated kernel on the CPU (tests/test_vbox.py): a block's
// threads are OS threads meeting at a barrier for __syncthreads(); blocks run one after
// another (a cluster's blocks together; every block at once in at_emu_launch_all), so a kernel's __shared__ arrays (function statics
// here) belong to the block that runs. Dynamic shared memory is `at_emu_smem`, a buffer of
// each block of a cluster, which the cluster's other blocks reach by
// __cluster_map_shared_rank; the cluster's threads meet at a barrier of their own. Built
// with -fsanitize=alignment: a vector access at an address its type does not allow (a fault
// on the GPU) aborts the run.
#pragma once
#include <barrier>
#include <cstddef>
#include <memory>
#include <optional>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __cluster_dims__(...)

struct dim3_ {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3_ threadIdx, blockIdx;
inline dim3_ gridDim, blockDim;
inline thread_local std::barrier<>* at_emu_barrier = nullptr;  // the block's
inline std::barrier<>* at_emu_cluster_barrier = nullptr;
inline thread_local std::optional<std::barrier<>::arrival_token> at_emu_cluster_token;
inline thread_local unsigned char* at_emu_smem = nullptr;  // the block's dynamic shared memory
inline unsigned at_emu_cluster = 1;
inline std::vector<unsigned char*> at_emu_cluster_smem;  // each rank's, of the running cluster

struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

inline void __syncthreads() { at_emu_barrier->arrive_and_wait(); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
template <typename T>
inline T __ldcs(const T* p) { return *p; }
template <typename T>
inline void __stcs(T* p, T v) { *p = v; }
template <typename T>
inline T __ldcg(const T* p) { return *p; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned __clusterRelativeBlockRank() { return blockIdx.x % at_emu_cluster; }
// `ptr` (in this block's dynamic shared memory) at the same offset in block `rank`'s
inline void* __cluster_map_shared_rank(const void* ptr, unsigned rank) {
    const std::ptrdiff_t off = (const unsigned char*)ptr - at_emu_smem;
    return at_emu_cluster_smem.at(rank) + off;
}
inline void __cluster_barrier_arrive() { at_emu_cluster_token = at_emu_cluster_barrier->arrive(); }
inline void __cluster_barrier_wait() {
    at_emu_cluster_barrier->wait(std::move(*at_emu_cluster_token));
    at_emu_cluster_token.reset();
}
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned sel = (s >> (4 * i)) & 7u;  // the sign-replicate mode is never used
        r |= (unsigned)((v >> (8 * sel)) & 0xffu) << (8 * i);
    }
    return r;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (sh & 31u));
}

// Blocks b0 .. b0 + count - 1 at once, block b0 + r's threads meeting at bars[r], its dynamic
// shared memory mem[r]; back when all are done.
inline void at_emu_blocks(unsigned b0, unsigned count, unsigned threads,
                          const std::vector<std::unique_ptr<std::barrier<>>>& bars,
                          const std::vector<unsigned char*>& mem, const std::function<void()>& kernel) {
    std::vector<std::thread> pool;
    for (unsigned r = 0; r < count; ++r)
        for (unsigned t = 0; t < threads; ++t)
            pool.emplace_back([&, r, t] {
                blockIdx.x = b0 + r;
                threadIdx.x = t;
                at_emu_barrier = bars[r].get();
                at_emu_smem = mem[r];
                kernel();
            });
    for (auto& th : pool) th.join();
}

// `count` blocks' barriers of `threads` and dynamic shared memories of `smem` bytes
inline void at_emu_block_state(unsigned count, unsigned threads, std::size_t smem,
                               std::vector<std::unique_ptr<std::barrier<>>>& bars,
                               std::vector<unsigned char*>& mem) {
    for (unsigned r = 0; r < count; ++r) {
        bars.push_back(std::make_unique<std::barrier<>>((std::ptrdiff_t)threads));
        mem.push_back((unsigned char*)std::aligned_alloc(16, (smem + 15) / 16 * 16 + 16));
    }
}

// Run `kernel` (a lambda calling the kernel with its arguments) on `grid` blocks of
// `threads` threads, in clusters of `cluster` blocks (grid a multiple of it), each block with
// `smem` bytes of dynamic shared memory.
inline void at_emu_launch(unsigned grid, unsigned threads, const std::function<void()>& kernel,
                          unsigned cluster = 1, std::size_t smem = 0) {
    if (cluster == 0 || grid % cluster) {
        std::fprintf(stderr, "emu: a grid of %u blocks in clusters of %u\n", grid, cluster);
        std::abort();
    }
    gridDim.x = grid;
    blockDim.x = threads;
    at_emu_cluster = cluster;
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    at_emu_cluster_smem.clear();
    at_emu_block_state(cluster, threads, smem, bars, at_emu_cluster_smem);
    std::barrier<> whole((std::ptrdiff_t)(threads * cluster));
    at_emu_cluster_barrier = &whole;
    for (unsigned b0 = 0; b0 < grid; b0 += cluster)
        at_emu_blocks(b0, cluster, threads, bars, at_emu_cluster_smem, kernel);
    for (unsigned char* p : at_emu_cluster_smem) std::free(p);
    at_emu_cluster_smem.clear();
    at_emu_cluster_barrier = nullptr;
    at_emu_cluster = 1;
}

// Run every block of `grid` at once, each with its own barrier and `smem` bytes of dynamic
// shared memory: for kernels whose blocks wait on one another (a staged COLS pass's blocks
// wait for items other blocks hold), which one block at a time would never show waiting.
// The kernel may have no static __shared__ arrays (here they would be every block's).
inline void at_emu_launch_all(unsigned grid, unsigned threads, const std::function<void()>& kernel,
                              std::size_t smem) {
    gridDim.x = grid;
    blockDim.x = threads;
    at_emu_cluster = 1;
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    std::vector<unsigned char*> mem;
    at_emu_block_state(grid, threads, smem, bars, mem);
    at_emu_blocks(0, grid, threads, bars, mem, kernel);
    for (unsigned char* p : mem) std::free(p);
}
