"""COLS access pattern vs band width and cluster size (H200 microbench, not the project's kernel).

A cluster of K blocks holds a band of WB bytes of every one of m rows (block k: rows
[k*ch, (k+1)*ch)), reads it, cluster barrier, writes it back: exch=0 the same cells (the
pattern's ceiling), exch=1 every element gathered from row (h[r] + C) mod m through DSMEM.
"""

import sys

import cupy as cp
import numpy as np

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
__device__ __forceinline__ u32 ctarank() { u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void csync() {
#if KK > 1
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}
__device__ __forceinline__ const unsigned char* remote(const unsigned char* p, u32 rank) {
#if KK > 1
  u64 out; asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"((u64)p), "r"(rank)); return (const unsigned char*)out;
#else
  return p;
#endif
}
template <int E> struct EL;
template <> struct EL<1> { typedef unsigned char t; };
template <> struct EL<2> { typedef unsigned short t; };
template <> struct EL<4> { typedef u32 t; };
template <> struct EL<8> { typedef u64 t; };
template <> struct EL<16> { typedef uint4 t; };

extern "C" __global__ void
#if KK > 1
__cluster_dims__(KK, 1, 1)
#endif
__launch_bounds__(TT) k(unsigned char* __restrict__ x, const u32* __restrict__ h, u32 m, u32 nb, u32 bands, int exch)
{
  extern __shared__ __align__(16) unsigned char sm[];
  typedef typename EL<EE>::t T;
  constexpr u32 V = 16 / EE, PER = WB / 16, U = 4;
  const u32 rank = KK > 1 ? ctarank() : 0;
  const u32 item = blockIdx.x / KK;
  const u32 ch = (m + KK - 1) / KK, r0 = rank * ch, r1 = min(m, r0 + ch), rows = r1 > r0 ? r1 - r0 : 0;
  const u32 tb = item % bands, z = item / bands;
  unsigned char* g = x + (u64)z * m * nb + (u64)tb * WB;
  uint4* s4 = (uint4*)sm;
  const u32 words = rows * PER;
  for (u32 e0 = threadIdx.x; e0 < words; e0 += U * TT) {
    uint4 v[U];
#pragma unroll
    for (u32 q = 0; q < U; ++q) { u32 e = e0 + q * TT; if (e < words) { u32 r = e / PER, c = e % PER; v[q] = *(const uint4*)(g + (u64)(r0 + r) * nb + c * 16); } }
#pragma unroll
    for (u32 q = 0; q < U; ++q) { u32 e = e0 + q * TT; if (e < words) s4[e] = v[q]; }
  }
  csync();
  const u32 C0 = tb * (WB / EE);
  for (u32 e = threadIdx.x; e < words; e += TT) {
    u32 r = e / PER, c = e % PER;
    union { uint4 w; T t[V]; } out;
    if (!exch) out.w = s4[e];
    else {
      u32 s = h[r0 + r] + (C0 + c * V) % m; if (s >= m) s -= m;
      u32 own = s / ch, loc = s - own * ch;
#pragma unroll
      for (u32 t = 0; t < V; ++t) {
        const unsigned char* p = remote(sm + (u64)loc * WB + c * 16 + t * EE, own);
        out.t[t] = *(const T*)p;
        if (++s == m) { s = 0; own = 0; loc = 0; } else if (++loc == ch) { loc = 0; ++own; }
      }
    }
    *(uint4*)(g + (u64)(r0 + r) * nb + c * 16) = out.w;
  }
  csync();
}
"""


def build(e, wb, kk, tt):
    mod = cp.RawModule(
        code=SRC, options=("-std=c++17", f"-DEE={e}", f"-DWB={wb}", f"-DKK={kk}", f"-DTT={tt}")
    )
    return mod.get_function("k")


def timeit(fn, reps=12, warm=3):
    """The median of `reps` timed runs of `fn` (ms, CUDA events) after `warm` untimed ones."""
    s, t = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for i in range(reps + warm):
        s.record()
        fn()
        t.record()
        t.synchronize()
        if i >= warm:
            out.append(cp.cuda.get_elapsed_time(s, t))
    return float(np.median(out))


def band_case(rng, m):
    """m rows of about 64 MB of random bytes (rows of a multiple of 256 bytes): the row
    bytes, the buffer, its host copy, a random row table h (host, device) and the time of a
    device-to-device copy of the buffer (ms)."""
    nb = ((64 << 20) // m) // 256 * 256
    buf = cp.asarray(rng.integers(0, 256, m * nb, dtype=np.uint8))
    dst = cp.empty_like(buf)
    hperm = rng.permutation(m).astype(np.uint32)
    tc = timeit(lambda: dst.data.copy_from_device_async(buf.data, buf.nbytes))
    return nb, buf, cp.asnumpy(buf).reshape(m, nb), hperm, cp.asarray(hperm), tc


def main():
    rng = np.random.default_rng(7)
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    for m in (1000, 3001, 6007, 7264, 12011):
        for e in (1, 2, 4, 16):
            nb, buf, ref, hperm, h, tc = band_case(rng, m)
            line = []
            for kk, wb in ((1, 32), (1, 64), (2, 64), (4, 128), (8, 128), (8, 256), (16, 256)):
                ch = -(-m // kk)
                smem = ch * wb
                if smem > 227 * 1024 or kk > 8:
                    continue
                try:
                    f = build(e, wb, kk, 512)
                    f.max_dynamic_shared_size_bytes = smem
                except Exception as ex:
                    line.append(f"K{kk}/{wb}B:err {str(ex)[:80]}")
                    continue
                bands = nb // wb
                grid = (bands * kk,)
                res = []
                for exch in (0, 1):
                    w = buf.copy()
                    f(
                        grid,
                        (512,),
                        (w, h, np.uint32(m), np.uint32(nb), np.uint32(bands), np.int32(exch)),
                        shared_mem=smem,
                    )
                    if exch:
                        R = rng.choice(m, 48, replace=False)
                        got = cp.asnumpy(w).reshape(m, nb // e, e)[R]
                        src = ref.reshape(m, nb // e, e)
                        C = np.arange(nb // e)
                        rows = (hperm[R, None].astype(np.int64) + C[None, :] % m) % m
                        ok = np.array_equal(got, src[rows, C[None, :]])
                    t = timeit(
                        lambda: f(
                            grid,
                            (512,),
                            (w, h, np.uint32(m), np.uint32(nb), np.uint32(bands), np.int32(exch)),
                            shared_mem=smem,
                        )
                    )
                    res.append(100 * tc / t)
                line.append(f"K{kk}/{wb}B {res[0]:5.1f}/{res[1]:5.1f}{'' if ok else ' WRONG'}")
            print(
                f"m={m:5d} e={e:2d} nb={nb:7d} copy {2 * m * nb / tc / 1e6:6.0f} GB/s | "
                + " | ".join(line),
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
