"""COLS's access pattern in place and out of place (H200 microbench, not the project's kernel).

A block reads a band of WB bytes of every one of m rows into shared memory, then writes it
back (the pattern of a COLS pass without its exchange): to x itself (in place) or to a second
buffer (out of place), rows of a pitch of a multiple of 256 bytes or off 128-byte lines by
`off` bytes. Bands of 32 bytes share each 128-byte line with three other blocks' bands; in
place, a line is then read and written by four blocks at different times.

    python dev/cols_cluster/lines.py
"""

import functools
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from element import timeit

SRC = r"""
extern "C" __global__ void __launch_bounds__(512)
k(const unsigned char* __restrict__ x, unsigned char* __restrict__ y, unsigned m, unsigned long long pitch)
{
    extern __shared__ __align__(16) unsigned char sm[];
    constexpr unsigned PER = WB / 16, U = 4;
    const unsigned long long off = (unsigned long long)blockIdx.x * WB;
    uint4* s4 = (uint4*)sm;
    const unsigned words = m * PER;
    for (unsigned e0 = threadIdx.x; e0 < words; e0 += U * 512) {
        uint4 v[U];
#pragma unroll
        for (unsigned q = 0; q < U; ++q) {
            const unsigned e = e0 + q * 512;
            if (e < words) v[q] = *(const uint4*)(x + (e / PER) * pitch + off + (e % PER) * 16);
        }
#pragma unroll
        for (unsigned q = 0; q < U; ++q) {
            const unsigned e = e0 + q * 512;
            if (e < words) s4[e] = v[q];
        }
    }
    __syncthreads();
    for (unsigned e = threadIdx.x; e < words; e += 512)
        *(uint4*)(y + (e / PER) * pitch + off + (e % PER) * 16) = s4[e];
}
"""


def copy(x, y, nbytes):
    y.data.copy_from_device_async(x.data, nbytes)


def band(f, bands, x, dst, m, pitch, smem):
    f((bands,), (512,), (x, dst, np.uint32(m), np.uint64(pitch)), shared_mem=smem)


def main():
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    for m in (1000, 3001, 6007):
        for off in (0, 16, 32, 64):
            pitch = ((160 << 20) // m) // 256 * 256 + off  # about 160 MB, past the L2
            x = cp.zeros(m * pitch + 256, dtype=np.uint8)
            y = cp.zeros_like(x)
            tc = timeit(functools.partial(copy, x, y, m * pitch))
            line = []
            for wb in (32, 64, 128):
                smem = m * wb
                if smem > 227 * 1024:
                    continue
                f = cp.RawModule(code=SRC, options=(f"-DWB={wb}",)).get_function("k")
                f.max_dynamic_shared_size_bytes = smem
                bands = (pitch - off) // wb
                res = []
                for dst in (x, y):
                    t = timeit(functools.partial(band, f, bands, x, dst, m, pitch, smem))
                    res.append(100 * tc / t)
                line.append(f"{wb}B in {res[0]:5.1f} out {res[1]:5.1f}")
            print(
                f"m={m:5d} pitch={pitch:7d} (mod 128: {pitch % 128:3d}) | " + " | ".join(line),
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
