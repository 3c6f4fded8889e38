// A CPU stand-in for the CUDA features the cast kernels use, so tests run a kernel's own
// code on machines without a GPU (tests/_cast_emu.py). Threads of a block are fibers on one
// OS thread: each runs until it reaches __syncthreads() or a warp collective, and the
// scheduler resumes them once every thread it waits for has arrived (a barrier some thread
// of the block never reaches is reported, not waited on forever). Conversions are
// cuda_fp8.h / cuda_bf16.h / cuda_fp16.h's own host code.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (sh & 31));
}
static inline int atomicMax(int* p, int v) { int old = *p; if (v > old) *p = v; return old; }

// --- the fiber scheduler ------------------------------------------------------------------
struct emu_fiber {
    ucontext_t ctx;
    unsigned tid;
    int state;  // 0 runnable, 1 at __syncthreads, 2 at a warp collective, 3 done
    unsigned value;
};
static std::vector<emu_fiber> emu_fibers;
static char* emu_stacks;
static size_t emu_stacks_bytes;
static ucontext_t emu_sched;
static unsigned emu_current;
static unsigned emu_warp_result[32];
static void (*emu_body)(void);
static int emu_error;

static inline void emu_wait(int state) {
    emu_fiber& f = emu_fibers[emu_current];
    f.state = state;
    swapcontext(&f.ctx, &emu_sched);
}
static inline void __syncthreads() { emu_wait(1); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
    if (mask != 0xffffffffu) { std::fprintf(stderr, "emu: partial warp mask\n"); std::abort(); }
    emu_fibers[emu_current].value = v;
    emu_wait(2);
    return emu_warp_result[emu_current / 32];
}
// A warp shuffle down by `d` lanes (a lane past the warp's last gets its own value back). The
// lanes resume in order once all 32 have arrived, so a lane reads the higher lanes' values
// before they run on and offer their next.
static inline unsigned __shfl_down_sync(unsigned mask, unsigned v, unsigned d) {
    if (mask != 0xffffffffu) { std::fprintf(stderr, "emu: partial warp mask\n"); std::abort(); }
    emu_fibers[emu_current].value = v;
    emu_wait(2);
    return emu_current % 32 + d < 32 ? emu_fibers[emu_current + d].value : v;
}
static void emu_entry() {
    emu_body();
    emu_fibers[emu_current].state = 3;
    swapcontext(&emu_fibers[emu_current].ctx, &emu_sched);
}

// Run every thread of one block to its end; 0, or an error code.
static int emu_block(unsigned threads) {
    const size_t stack = 1 << 20;  // untouched pages cost nothing (mmap); reports need room
    emu_fibers.assign(threads, emu_fiber{});
    if (emu_stacks_bytes < stack * threads) {
        if (emu_stacks) munmap(emu_stacks, emu_stacks_bytes);
        emu_stacks_bytes = stack * threads;
        emu_stacks = (char*)mmap(nullptr, emu_stacks_bytes, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    for (unsigned i = 0; i < threads; ++i) {
        emu_fiber& f = emu_fibers[i];
        f.tid = i;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = emu_stacks + i * stack;
        f.ctx.uc_stack.ss_size = stack;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, emu_entry, 0);
    }
    for (;;) {
        bool ran = false;
        for (unsigned i = 0; i < threads; ++i) {
            if (emu_fibers[i].state != 0) continue;
            emu_current = i;
            threadIdx.x = i;
            swapcontext(&emu_sched, &emu_fibers[i].ctx);
            ran = true;
        }
        if (ran) continue;
        unsigned done = 0, at_bar = 0;
        for (auto& f : emu_fibers) { done += f.state == 3; at_bar += f.state == 1; }
        if (done == threads) return 0;
        if (at_bar == threads) {
            for (auto& f : emu_fibers) f.state = 0;
            continue;
        }
        bool released = false;
        for (unsigned w = 0; w * 32 < threads; ++w) {
            unsigned at = 0, m = 0;
            for (unsigned i = w * 32; i < w * 32 + 32 && i < threads; ++i) {
                at += emu_fibers[i].state == 2;
                if (emu_fibers[i].value > m) m = emu_fibers[i].value;
            }
            if (at == 32) {
                emu_warp_result[w] = m;
                for (unsigned i = w * 32; i < w * 32 + 32; ++i) emu_fibers[i].state = 0;
                released = true;
            }
        }
        if (!released) return 2;  // some thread waits at a barrier others never reach
    }
}
