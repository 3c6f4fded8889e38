"""COLS skew + whole-row DSMEM gather microbench (H200).  Kernels: kern.cuh.

  python3 bench.py gen     # writes all.cu / base_e*.cu (then build.sh -> cubins, here, no GPU)
  python3 bench.py [out]   # on the GPU: times every variant, percent of a D2D copy of the same bytes
Per variant four modes: pat (same loads/stores, no skew, no exchange), exch (gather over DSMEM,
no skew), skew (skew, local read-out), full (skew + gather; checked against NumPy on 48 rows).
"""

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SKS, ES, WBS, KS = (0, 1), (1, 2, 4, 16), (64, 128, 256), (2, 4, 8, 16)
TTS = (
    (512, 1),
    (512, 3),
    (512, 4),
    (1024, 1),
)  # (threads, min blocks per SM for __launch_bounds__)
MS = (1000, 3001, 6007, 7264, 12011, 20011)
SMEM_MAX = 232448


def gen():
    with open(os.path.join(HERE, "all.cu"), "w") as f:
        f.write('#include "kern.cuh"\n')
        for sk in SKS:
            for e in ES:
                for wb in WBS:
                    for k in KS:
                        for tt, mb in TTS:
                            f.write(f"KDEF({sk}, {e}, {wb}, {k}, {tt}, {mb})\n")
    src = open(os.path.join(HERE, "element.py")).read()  # the element-gather kernel (baseline)
    with open(os.path.join(HERE, "base.cu"), "w") as f:
        f.write(src.split('SRC = r"""', 1)[1].split('"""', 1)[0])


def smem_of(sk, e, wb, k, m):
    ch = -(-m // k)
    return (ch + wb // e - 1) * wb if sk == 1 else ch * wb


def main(outdir):
    import cupy as cp
    from element import band_case, timeit  # this folder's element-gather probe

    t_start = time.time()
    log = open(os.path.join(outdir, "cluster_bench.txt"), "w")

    def pr(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    props = cp.cuda.runtime.getDeviceProperties(0)
    pr(f"{props['name'].decode()} SMs={props['multiProcessorCount']}")
    mod = cp.RawModule(path=os.path.join(HERE, "all.cubin"))
    base = {
        e: cp.RawModule(path=os.path.join(HERE, f"base_e{e}.cubin")).get_function("k") for e in ES
    }
    try:
        import ctypes

        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        libcuda = None

    def fptr(f):
        return getattr(f, "kernel", f).ptr

    def occ(f, tt, smem):
        if libcuda is None:
            return "?"
        n = ctypes.c_int(0)
        r = libcuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(n), ctypes.c_void_p(fptr(f)), tt, ctypes.c_size_t(smem)
        )
        return n.value if r == 0 else f"rc{r}"

    def setup(name, smem, k):
        f = mod.get_function(name)
        f.max_dynamic_shared_size_bytes = smem
        if k > 8:
            r = -1
            try:
                cp.cuda.driver.funcSetAttribute(fptr(f), 14, 1)  # NON_PORTABLE_CLUSTER_SIZE_ALLOWED
                r = 0
            except Exception:
                if libcuda is not None:
                    r = libcuda.cuFuncSetAttribute(ctypes.c_void_p(fptr(f)), 14, 1)
            if r != 0:
                raise RuntimeError(f"nonportable attr rc={r}")
        return f

    rng = np.random.default_rng(7)
    rows_csv = ["m,e,sk,K,WB,TT,smem,pat,exch,skew,full,ok"]
    summary = []
    nwrong = 0
    for m in MS:
        for e in ES:
            if time.time() - t_start > 165:
                pr(f"TIME: skipped m={m} e={e}")
                continue
            nb, buf, host, hperm, h, tc = band_case(rng, m)
            R = np.sort(rng.choice(m, 48, replace=False))
            C = np.arange(nb // e)
            want = host.reshape(m, nb // e, e)[
                (hperm[R, None].astype(np.int64) + C[None, :]) % m, C[None, :]
            ].reshape(48, nb)
            Rg = cp.asarray(R)
            pr(f"== m={m} e={e} nb={nb} copy {tc * 1e3:.1f} us = {2 * m * nb / tc / 1e6:.0f} GB/s")
            w = buf.copy()
            # baseline: K=1, 32-byte band, element gather (element.py)
            bl = None
            if m * 32 <= SMEM_MAX:
                fb = base[e]
                fb.max_dynamic_shared_size_bytes = m * 32
                bands = nb // 32
                args = lambda ex: (
                    w,
                    h,
                    np.uint32(m),
                    np.uint32(nb),
                    np.uint32(bands),
                    np.int32(ex),
                )
                w[...] = buf
                fb((bands,), (512,), args(1), shared_mem=m * 32)
                okb = np.array_equal(cp.asnumpy(w.reshape(m, nb)[Rg]), want)
                p0 = (
                    100
                    * tc
                    / timeit(lambda: fb((bands,), (512,), args(0), shared_mem=m * 32), reps=15)
                )
                p1 = (
                    100
                    * tc
                    / timeit(lambda: fb((bands,), (512,), args(1), shared_mem=m * 32), reps=15)
                )
                bl = p1
                pr(
                    f"  base K1/32B elem-gather: pat {p0:5.1f} full {p1:5.1f}{'' if okb else ' WRONG'}"
                )
            best = None
            for sk in SKS:
                for k in KS:
                    for wb in WBS:
                        for tt, mb in TTS:
                            smem = smem_of(sk, e, wb, k, m)
                            if smem > SMEM_MAX or nb % wb:
                                continue
                            name = f"k_{sk}_{e}_{wb}_{k}_{tt}_{mb}"
                            tag = f"  {'SW'[sk]} K{k:<2d} {wb:3d}B T{tt:<4d}b{mb} smem {smem // 1024:3d}K"
                            bands = nb // wb
                            grid = (bands * k,)
                            try:
                                f = setup(name, smem, k)
                                tag += f" occ {occ(f, tt, smem)}"
                                a = lambda md: (w, h, np.uint32(m), np.uint32(nb), np.int32(md))
                                w[...] = buf
                                f(grid, (tt,), a(3), shared_mem=smem)
                                got = cp.asnumpy(w.reshape(m, nb)[Rg])
                                ok = np.array_equal(got, want)
                                res = [
                                    100
                                    * tc
                                    / timeit(
                                        lambda: f(grid, (tt,), a(md), shared_mem=smem), reps=15
                                    )
                                    for md in (0, 1, 2, 3)
                                ]
                            except Exception as ex:
                                pr(f"{tag}: ERR {type(ex).__name__} {str(ex)[:100]}")
                                try:
                                    cp.cuda.Device().synchronize()
                                except Exception:
                                    pass
                                continue
                            nwrong += not ok
                            pr(
                                f"{tag}: pat {res[0]:5.1f} exch {res[1]:5.1f} skew {res[2]:5.1f} full {res[3]:5.1f}{'' if ok else ' WRONG'}"
                            )
                            rows_csv.append(
                                f"{m},{e},{'SW'[sk]},{k},{wb},{tt}b{mb},{smem},{res[0]:.1f},{res[1]:.1f},{res[2]:.1f},{res[3]:.1f},{int(ok)}"
                            )
                            if ok and (best is None or res[3] > best[0]):
                                best = (res[3], f"{'SW'[sk]} K{k} {wb}B T{tt}b{mb}", res)
            if best:
                summary.append(
                    f"m={m:5d} e={e:2d}: best full {best[0]:5.1f}% ({best[1]}; pat {best[2][0]:.1f} exch {best[2][1]:.1f} skew {best[2][2]:.1f})"
                    f" | baseline {'n/a' if bl is None else f'{bl:.1f}'}"
                )
            cp.get_default_memory_pool().free_all_blocks()
    pr("== summary (percent of D2D copy)")
    for s in summary:
        pr(s)
    pr(f"WRONG count: {nwrong}; elapsed {time.time() - t_start:.0f}s")
    with open(os.path.join(outdir, "cluster_bench.csv"), "w") as fo:
        fo.write("\n".join(rows_csv) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "gen":
        gen()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else ".")
