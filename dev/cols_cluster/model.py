"""Host-side model of kern.cuh's index arithmetic (no GPU): checks S and W against the COLS spec."""

import numpy as np


def run_model(x, h, m, nb, E, WB, K, SK, TT=512, PP=None):
    V, PER, WC = 16 // E, WB // 16, WB // E
    ch = -(-m // K)
    out = x.copy()
    bands = nb // WB
    for tb in range(bands):
        C0 = tb * WC
        smems = []
        for rank in range(K):
            r0 = rank * ch
            rows = min(ch, m - r0) if r0 < m else 0
            base = (r0 + C0 % m) % m
            nA = rows + WC - 1 if rows else 0
            sm = np.zeros(((rows + WC - 1) if SK == 1 else max(rows, 1)) * WB + 16, np.uint8)
            for f in range(nA * PER):
                j, cv = divmod(f, PER)
                if not (j >= cv * V and j - cv * V < rows + V - 1):
                    continue
                gr = (base + j) % m
                v = x[gr, tb * WB + cv * 16 : tb * WB + cv * 16 + 16]
                if SK == 1:
                    sm[j * WB + cv * 16 : j * WB + cv * 16 + 16] = v
                else:
                    jb = j - cv * V
                    if V == 1:
                        if jb < rows:
                            sm[jb * WB + cv * 16 : jb * WB + cv * 16 + 16] = v
                        continue
                    rq = ((f % TT) >> 3) & 3
                    w = np.roll(v.reshape(4, 4), -rq, axis=0).reshape(16)  # rotated words
                    for t in range(V):
                        to = (t + rq * (V // 4)) & (V - 1)
                        if 0 <= jb - to < rows:
                            p = jb * WB + cv * V * E + to * E - to * WB
                            sm[p : p + E] = w[t * E : t * E + E]
            if SK == 1:
                G, P = TT // PER, (PP or (7 if WB == 64 else 8))
                for ib in range(0, rows, G * P):
                    outs = {}
                    for th in range(TT):
                        gi, cv = divmod(th, PER)
                        i0 = ib + gi * P
                        if i0 >= rows:
                            continue
                        for p in range(P):
                            o = np.zeros(16, np.uint8)
                            for t in range(V):
                                r = p + t
                                if i0 + (r - (V - 1) if r >= V - 1 else 0) < rows:
                                    a = sm[
                                        (i0 + cv * V + r) * WB + cv * 16 : (i0 + cv * V + r) * WB
                                        + cv * 16
                                        + 16
                                    ]
                                    o[t * E : t * E + E] = a[t * E : t * E + E]
                            outs[(i0 + p, cv)] = o
                    for (i, cv), o in outs.items():
                        if i < rows:
                            sm[i * WB + cv * 16 : i * WB + cv * 16 + 16] = o
            smems.append(sm)
        magic = ((1 << 32) + ch - 1) // ch
        for rank in range(K):
            r0 = rank * ch
            rows = min(ch, m - r0) if r0 < m else 0
            for f in range(rows * PER):
                i, cv = divmod(f, PER)
                s = int(h[r0 + i])
                o = (s * magic) >> 32
                loc = s - o * ch
                assert o == s // ch
                out[r0 + i, tb * WB + cv * 16 : tb * WB + cv * 16 + 16] = smems[o][
                    loc * WB + cv * 16 : loc * WB + cv * 16 + 16
                ]
    return out


def ref(x, h, m, nb, E):
    src = x.reshape(m, nb // E, E)
    C = np.arange(nb // E)
    rows = (h[:, None].astype(np.int64) + C[None, :]) % m
    return src[rows, C[None, :]].reshape(m, nb)


if __name__ == "__main__":
    rng = np.random.default_rng(1)
    bad = 0
    for m, nb, E, WB, K, SK, TT in [
        (37, 256, 1, 64, 2, 0, 64),
        (37, 256, 1, 64, 2, 1, 64),
        (41, 256, 2, 128, 4, 0, 64),
        (41, 512, 2, 128, 4, 1, 64),
        (53, 512, 4, 256, 2, 0, 128),
        (53, 512, 4, 256, 2, 1, 64),
        (29, 256, 16, 128, 4, 1, 32),
        (29, 256, 16, 64, 4, 0, 32),
        (300, 256, 1, 256, 2, 1, 64),
        (300, 256, 1, 128, 16, 0, 64),
        (67, 256, 16, 256, 16, 1, 64),
    ]:
        x = rng.integers(0, 256, (m, nb), dtype=np.uint8)
        h = rng.permutation(m).astype(np.uint32)
        got = run_model(x, h, m, nb, E, WB, K, SK, TT)
        ok = np.array_equal(got, ref(x, h, m, nb, E))
        bad += not ok
        print(m, nb, E, WB, K, SK, TT, "ok" if ok else "WRONG")
    print("bad", bad)
