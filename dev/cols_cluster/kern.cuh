// COLS pass as skew + whole-row gather over a thread-block cluster (H200 microbench).
// Block k of a K-cluster owns T rows [k*ch, k*ch+rows) of one band of WB bytes.
//   A[j] = band row (k*ch + C0 + j) mod m, j in [0, rows+WC-1)   (chunk shifted by C0 + halo)
//   T[i][c] = A[i+c][c]                                           (local skew)
//   new[R][c] = T[h[R]][c]                                        (one 16-B DSMEM load per 16 B)
// mode bit 1: skew (else vector-granular placement, same memory ops); bit 0: gather via DSMEM
// (else local read-out of own rows).  mode 0 = pattern ceiling, 3 = full kernel.
// SK=0 ("S"): skew fused into the load: each loaded 16-B vector is scattered element-wise
//             into T (lane-rotated element order: bank-conflict free); smem = rows*WB.
// SK=1 ("W"): A stored row-wise (smem = (rows+WC-1)*WB), then T built in place, tile by tile,
//             by a diagonal read (16-B loads of A, byte/half/word merge in registers).
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 ctarank() { u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ u32 mapa(u32 a, u32 rank) {
  u32 r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank)); return r;
}
__device__ __forceinline__ uint4 ld_dsmem(u32 a) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
  return v;
}
struct W4 { u32 w[4]; };
__device__ __forceinline__ W4 tow(uint4 v) { W4 r; r.w[0] = v.x; r.w[1] = v.y; r.w[2] = v.z; r.w[3] = v.w; return r; }
__device__ __forceinline__ uint4 tov(const W4& r) { return make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]); }

template <int E, int WB, int K, int TT, int SK, int MINB>
__device__ __forceinline__ void body(unsigned char* __restrict__ x, const u32* __restrict__ h, u32 m, u32 nb, int mode)
{
  extern __shared__ __align__(16) unsigned char sm[];
  constexpr u32 V = 16 / E, PER = WB / 16, WC = WB / E, U = (TT >= 1024 || MINB >= 3) ? 4 : 8;
  const u32 rank = ctarank();
  const u32 tb = blockIdx.x / K;
  const u32 ch = (m + K - 1) / K, r0 = rank * ch;
  const u32 rows = r0 < m ? min(ch, m - r0) : 0;
  unsigned char* g = x + (u64)tb * WB;
  const u32 C0 = tb * WC;
  const u32 base = (r0 + C0 % m) % m;
  const bool skew = (mode & 2) != 0, exch = (mode & 1) != 0;
  const u32 nA = rows ? rows + WC - 1 : 0;
  const u32 words = nA * PER;

  // ---- phase 1: load chunk + halo (only vectors whose elements land in [0, rows)) ----
  for (u32 f0 = threadIdx.x; f0 < words; f0 += U * TT) {
    uint4 v[U];
    bool ok[U];
#pragma unroll
    for (u32 q = 0; q < U; ++q) {
      const u32 f = f0 + q * TT, j = f / PER, cv = f % PER;
      ok[q] = f < words && (j - cv * V) < rows + V - 1 && j >= cv * V;
      if (ok[q]) {
        u32 gr = base + j;
        while (gr >= m) gr -= m;
        v[q] = __ldg((const uint4*)(g + (u64)gr * nb + cv * 16));
      }
    }
#pragma unroll
    for (u32 q = 0; q < U; ++q) {
      if (!ok[q]) continue;
      const u32 f = f0 + q * TT, j = f / PER, cv = f % PER;
      if (SK == 1) {
        *(uint4*)(sm + j * WB + cv * 16) = v[q];
      } else {
        const u32 jb = j - cv * V;  // T row of this vector's element 0
        if (V == 1 || !skew) {
          if (jb < rows) *(uint4*)(sm + jb * WB + cv * 16) = v[q];
        } else {
          const u32 rq = (threadIdx.x >> 3) & 3;  // rotate word order per lane group: no bank conflicts
          u32 a0 = v[q].x, a1 = v[q].y, a2 = v[q].z, a3 = v[q].w;
          if (rq & 1) { u32 t = a0; a0 = a1; a1 = a2; a2 = a3; a3 = t; }
          if (rq & 2) { u32 t = a0; a0 = a2; a2 = t; t = a1; a1 = a3; a3 = t; }
          const u32 aw[4] = {a0, a1, a2, a3};
          unsigned char* rb = sm + jb * WB + cv * V * E;
#pragma unroll
          for (u32 t = 0; t < V; ++t) {
            const u32 to = (t + rq * (V / 4)) & (V - 1);
            if (jb - to < rows) {
              unsigned char* p = rb + to * E - to * WB;
              const u32 wv = aw[(t * E) / 4] >> (8 * ((t * E) % 4));
              if (E == 1) *p = (unsigned char)wv;
              else if (E == 2) *(unsigned short*)p = (unsigned short)wv;
              else *(u32*)p = wv;
            }
          }
        }
      }
    }
  }

  // ---- phase 2 (W only): T built in place, tile by tile ----
  if (SK == 1 && skew) {
    constexpr u32 G = TT / PER, P = MINB >= 3 ? 3 : (WB == 64) ? 7 : 8;
    const u32 gi = threadIdx.x / PER, cv = threadIdx.x % PER;
    __syncthreads();
    for (u32 ib = 0; ib < rows; ib += G * P) {
      const u32 i0 = ib + gi * P;
      W4 out[P];
#pragma unroll
      for (u32 p = 0; p < P; ++p) out[p].w[0] = out[p].w[1] = out[p].w[2] = out[p].w[3] = 0;
      if (i0 < rows) {
        const unsigned char* src = sm + (i0 + cv * V) * WB + cv * 16;
#pragma unroll
        for (u32 r = 0; r < P + V - 1; ++r) {
          if (i0 + (r >= V - 1 ? r - (V - 1) : 0) < rows) {
            const W4 a = tow(*(const uint4*)(src + r * WB));
#pragma unroll
            for (u32 p = 0; p < P; ++p) {
              if (r < p || r - p >= V) continue;
              const u32 t = r - p, k = (t * E) / 4, sh = 8 * ((t * E) % 4);
              const u32 mask = E >= 4 ? 0xffffffffu : (((1u << (8 * E)) - 1) << sh);
              if (E == 16) out[p] = a;
              else if (E == 4) out[p].w[k] = a.w[k];
              else out[p].w[k] |= a.w[k] & mask;
            }
          }
        }
      }
      __syncthreads();
      if (i0 < rows) {
#pragma unroll
        for (u32 p = 0; p < P; ++p)
          if (i0 + p < rows) *(uint4*)(sm + (i0 + p) * WB + cv * 16) = tov(out[p]);
      }
    }
  }

  cluster_sync();

  // ---- phase 4: gather whole T rows (16-B DSMEM loads) and store band rows ----
  {
    const u32 own = rows * PER;
    const u32 sbase = (u32)__cvta_generic_to_shared(sm);
    const u32 magic = (u32)((((u64)1 << 32) + ch - 1) / ch);
    for (u32 f0 = threadIdx.x; f0 < own; f0 += U * TT) {
      uint4 v[U];
#pragma unroll
      for (u32 q = 0; q < U; ++q) {
        const u32 f = f0 + q * TT;
        if (f < own) {
          const u32 i = f / PER, cv = f % PER;
          if (exch) {
            const u32 s = __ldg(h + r0 + i);
            const u32 o = __umulhi(s, magic), l = s - o * ch;
            v[q] = ld_dsmem(mapa(sbase + l * WB + cv * 16, o));
          } else {
            v[q] = *(const uint4*)(sm + i * WB + cv * 16);
          }
        }
      }
#pragma unroll
      for (u32 q = 0; q < U; ++q) {
        const u32 f = f0 + q * TT;
        if (f < own) {
          const u32 i = f / PER, cv = f % PER;
          *(uint4*)(g + (u64)(r0 + i) * nb + cv * 16) = v[q];
        }
      }
    }
  }
  cluster_sync();
}

#define KDEF(SK, E, WB, K, TT, MINB)                                                                          \
  extern "C" __global__ void __cluster_dims__(K, 1, 1) __launch_bounds__(TT, MINB)                             \
      k_##SK##_##E##_##WB##_##K##_##TT##_##MINB(unsigned char* x, const u32* h, u32 m, u32 nb, int mode) { \
    body<E, WB, K, TT, SK, MINB>(x, h, m, nb, mode);                                                        \
  }
