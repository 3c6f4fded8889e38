// Just enough of CUDA to run one generated kernel on the CPU (tests/test_vbox.py): a block's
// threads are OS threads meeting at a barrier for __syncthreads(); blocks run one after
// another, so a kernel's __shared__ arrays (function statics here) belong to the block that
// runs. Built with -fsanitize=alignment: a vector access at an address its type does not
// allow (a fault on the GPU) aborts the run.
#pragma once
#include <barrier>
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

struct dim3_ {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3_ threadIdx, blockIdx;
inline dim3_ gridDim, blockDim;
inline std::barrier<>* at_emu_barrier = nullptr;

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
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
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

// Run `kernel` (a lambda calling the kernel with its arguments) on `grid` blocks of
// `threads` threads.
inline void at_emu_launch(unsigned grid, unsigned threads, const std::function<void()>& kernel) {
    gridDim.x = grid;
    blockDim.x = threads;
    std::barrier<> bar((std::ptrdiff_t)threads);
    at_emu_barrier = &bar;
    for (unsigned b = 0; b < grid; ++b) {
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t)
            pool.emplace_back([&, b, t] {
                blockIdx.x = b;
                threadIdx.x = t;
                kernel();
            });
        for (auto& th : pool) th.join();
    }
    at_emu_barrier = nullptr;
}
