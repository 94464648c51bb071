#!/usr/bin/env python3
"""attn_prefill_emu.py — the index math of cuda_attn_prefill.cu's kernel, emulated lane by lane on the CPU.

Why: the two-m-tile variant (MT = 2) changes which rows a warp owns, the Q fragments' addresses, the
staging offsets (LEAN) and the output addresses; no GPU is needed to check that they name the right
elements. This follows the kernel's control flow for every block, warp and lane (groups of entries,
key tiles, the causal mask, the online softmax in base 2, the writes) with shared memory as a flat
array, ldmatrix (.x4 and .x4.trans) and mma.m16n8k16 by their PTX fragment layouts, in float64
without f16 rounding, and compares the output with attention computed directly: an index mistake
shows as an O(1) error, a correct kernel as ~1e-15. Races and cp.async ordering are not modelled.

    python3 dev/kernels/attn_prefill_emu.py        (about a minute; plain Python, no numpy)
"""
import math
import random

FA_WARPS, FA_PAD = 4, 8
FA_THREADS, FA_BM = FA_WARPS * 32, FA_WARPS * 16


def ldsm_x4(smem, addr, trans=False):
    """addr[lane]: element address of the row lane gives (lanes 8j .. 8j + 7: matrix j's rows).
    Returns r[lane][j] = (x0, x1): row lane / 4, columns 2 (lane % 4) + {0, 1} of matrix j (or of its
    transpose)."""
    r = [[None] * 4 for _ in range(32)]
    for lane in range(32):
        for j in range(4):
            if not trans:
                a = addr[8 * j + lane // 4] + 2 * (lane % 4)
                r[lane][j] = (smem[a], smem[a + 1])
            else:  # element (i, c) of the transpose is the stored matrix's (c, i)
                c = lane // 4
                r[lane][j] = tuple(smem[addr[8 * j + 2 * (lane % 4) + e] + c] for e in range(2))
    return r


def mma(c, a, b0, b1):
    """c[lane][4] += A (16x16, a[lane][4] pairs) B (16x8, b0/b1[lane] pairs), m16n8k16 row.col."""
    A = [[0.0] * 16 for _ in range(16)]
    B = [[0.0] * 8 for _ in range(16)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for reg in range(4):
            for e in range(2):
                A[g + 8 * (reg & 1)][2 * t + e + 8 * (reg >> 1)] = a[lane][reg][e]
        for e in range(2):
            B[2 * t + e][g] = b0[lane][e]
            B[2 * t + e + 8][g] = b1[lane][e]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            row, col = g + 8 * (i >> 1), 2 * t + (i & 1)
            c[lane][i] += sum(A[row][k] * B[k][col] for k in range(16))


def kernel(MT, D, BN, gs, q, kc, vc, bs, pos, tab_off, tabs, n, n_head, n_head_kv, qscale, out):
    LD, BM, LEAN = D + FA_PAD, FA_BM * MT, MT > 1
    group = n_head // n_head_kv
    ntok = BM >> gs
    grid_x, grid_y = (n + ntok - 1) // ntok, n_head >> gs
    QS, KS, VS = 0, BM * LD, (BM + BN) * LD
    for bx in range(grid_x):
        for by in range(grid_y):
            smem = [float('nan')] * ((BM + 2 * BN) * LD)
            t0 = (grid_x - 1 - bx) * ntok
            n_tok = min(ntok, n - t0)
            h0 = by << gs
            kvh, gmask = h0 // group, (1 << gs) - 1
            pos_s = [pos[t0 + i] if i < n_tok else -1 for i in range(ntok)]
            off_s = [tab_off[t0 + i] if i < n_tok else -1 for i in range(ntok)]
            for c in range(BM * D):
                r, d = c // D, c % D
                j = r >> gs
                x = q[((t0 + j) * n_head + h0 + (r & gmask)) * D + d] if j < n_tok else 0.0
                smem[QS + r * LD + d] = x * qscale
            last_s = [-1] * n_tok
            for tid in range(n_tok):
                lead = all(off_s[k] != off_s[tid] for k in range(tid))
                if lead:
                    last_s[tid] = max(pos_s[k] for k in range(tid, n_tok) if off_s[k] == off_s[tid])

            def row(warp, lane, m, h):
                return 16 * (MT * warp + m) + lane // 4 + 8 * h

            for s in range(n_tok):
                if last_s[s] < 0:
                    continue
                n_keys, off = last_s[s] + 1, off_s[s]
                n_tiles = (n_keys + BN - 1) // BN

                def rpos(warp, lane, m, h):
                    j = row(warp, lane, m, h) >> gs
                    return pos_s[j] if j < n_tok and off_s[j] == off else -1

                def fa_row(p):
                    return (tabs[off + p // bs] * bs + p % bs) * n_head_kv + kvh if p < n_keys else -1

                def stage(base, cache, k0):
                    rows = [fa_row(k0 + i) for i in range(BN)]
                    CPR = D // 8
                    for tid in range(FA_THREADS):
                        for i in range(BN * CPR // FA_THREADS):
                            cc = tid + i * FA_THREADS
                            r = tid // CPR + i * (FA_THREADS // CPR) if LEAN else cc // CPR
                            c8 = tid % CPR if LEAN else cc % CPR
                            for e in range(8):
                                smem[base + r * LD + 8 * c8 + e] = 0.0 if rows[r] < 0 else cache[rows[r] * D + 8 * c8 + e]

                W = range(FA_WARPS)
                wmax = [max(rpos(w, l, m, h) for l in range(32) for m in range(MT) for h in range(2)) for w in W]
                oacc = [[[[0.0] * 4 for _ in range(D // 8)] for _ in range(MT)] for _ in range(32 * FA_WARPS)]
                mr = [[[-math.inf] * 2 for _ in range(MT)] for _ in range(32 * FA_WARPS)]
                lr = [[[0.0] * 2 for _ in range(MT)] for _ in range(32 * FA_WARPS)]
                for jt in range(n_tiles):
                    k0 = jt * BN
                    stage(KS, kc, k0)
                    stage(VS, vc, k0)
                    for w in W:
                        if wmax[w] < k0:
                            continue
                        # S = Q K^T; sacc[lane][m][i][4]
                        sacc = [[[[0.0] * 4 for _ in range(BN // 8)] for _ in range(MT)] for _ in range(32)]
                        for kk in range(D // 16):
                            a = [ldsm_x4(smem, [QS + (16 * (MT * w + m) + l % 16) * LD + 16 * kk + 8 * (l // 16)
                                                for l in range(32)]) for m in range(MT)]
                            for np_ in range(BN // 16):
                                b = ldsm_x4(smem, [KS + (16 * np_ + l % 8 + 8 * (l // 16)) * LD + 16 * kk + 8 * (l // 8 % 2)
                                                   for l in range(32)])
                                for m in range(MT):
                                    for half, (x, y) in enumerate(((0, 1), (2, 3))):
                                        c = [sacc[l][m][2 * np_ + half] for l in range(32)]
                                        mma(c, a[m], [b[l][x] for l in range(32)], [b[l][y] for l in range(32)])
                        for l in range(32):
                            th = 32 * w + l
                            tig = l % 4
                            for m in range(MT):
                                pa, pb = rpos(w, l, m, 0), rpos(w, l, m, 1)
                                for i in range(BN // 8):
                                    for e in range(2):
                                        key = k0 + 8 * i + 2 * tig + e
                                        if key > pa:
                                            sacc[l][m][i][e] = -math.inf
                                        if key > pb:
                                            sacc[l][m][i][2 + e] = -math.inf
                        # online softmax: the row max over the row's four lanes
                        for m in range(MT):
                            for l0 in range(0, 32, 4):
                                for h in range(2):
                                    lanes = range(l0, l0 + 4)
                                    mx = max([mr[32 * w + l][m][h] for l in lanes] +
                                             [sacc[l][m][i][2 * h + e] for l in lanes for i in range(BN // 8) for e in range(2)])
                                    u = 0.0 if mx == -math.inf else mx
                                    for l in lanes:
                                        th = 32 * w + l
                                        f = 2.0 ** (mr[th][m][h] - u) if mr[th][m][h] != -math.inf else 0.0
                                        mr[th][m][h] = mx
                                        ssum = 0.0
                                        for i in range(BN // 8):
                                            for e in range(2):
                                                v = sacc[l][m][i][2 * h + e]
                                                v = 2.0 ** (v - u) if v != -math.inf else 0.0
                                                sacc[l][m][i][2 * h + e] = v
                                                ssum += v
                                        lr[th][m][h] = lr[th][m][h] * f + ssum
                                        for i in range(D // 8):
                                            oacc[th][m][i][2 * h] *= f
                                            oacc[th][m][i][2 * h + 1] *= f
                        # O += P V: P's A fragment of key chunk kc2 from n-tiles 2 kc2, 2 kc2 + 1
                        for kc2 in range(BN // 16):
                            pf = [[((sacc[l][m][2 * kc2][0], sacc[l][m][2 * kc2][1]),
                                    (sacc[l][m][2 * kc2][2], sacc[l][m][2 * kc2][3]),
                                    (sacc[l][m][2 * kc2 + 1][0], sacc[l][m][2 * kc2 + 1][1]),
                                    (sacc[l][m][2 * kc2 + 1][2], sacc[l][m][2 * kc2 + 1][3])) for l in range(32)]
                                  for m in range(MT)]
                            for dp in range(D // 16):
                                b = ldsm_x4(smem, [VS + (16 * kc2 + l % 16) * LD + 16 * dp + 8 * (l // 16) for l in range(32)],
                                            trans=True)
                                for m in range(MT):
                                    for half, (x, y) in enumerate(((0, 1), (2, 3))):
                                        c = [oacc[32 * w + l][m][2 * dp + half] for l in range(32)]
                                        mma(c, pf[m], [b[l][x] for l in range(32)], [b[l][y] for l in range(32)])
                # l over the row's four lanes, then the writes
                for w in W:
                    for l in range(32):
                        th, tig = 32 * w + l, l % 4
                        for m in range(MT):
                            for h in range(2):
                                if rpos(w, l, m, h) < 0:
                                    continue
                                lsum = sum(lr[32 * w + (l & ~3) + o][m][h] for o in range(4))
                                r = row(w, l, m, h)
                                at = ((t0 + (r >> gs)) * n_head + h0 + (r & gmask)) * D + 2 * tig
                                for i in range(D // 8):
                                    out[at + 8 * i] = oacc[th][m][i][2 * h] / lsum
                                    out[at + 8 * i + 1] = oacc[th][m][i][2 * h + 1] / lsum


def case(MT, D, n_head, n_head_kv, seqs, bs=16, seed=1):
    """seqs: (first position, entries) per sequence, laid out one after another in the batch."""
    rnd = random.Random(seed)
    BN = 32 if D == 256 else 64
    group = n_head // n_head_kv
    gs = 3 if group % 8 == 0 else 2 if group % 4 == 0 else 1 if group % 2 == 0 else 0
    pos, tab_off, tabs = [], [], []
    for p0, cnt in seqs:  # each sequence its own shuffled pages
        n_pages = (p0 + cnt + bs - 1) // bs
        pages = list(range(len(tabs) and max(tabs) + 1, (len(tabs) and max(tabs) + 1) + n_pages))
        rnd.shuffle(pages)
        off = len(tabs)
        tabs += pages
        pos += [p0 + i for i in range(cnt)]
        tab_off += [off] * cnt
    n = len(pos)
    n_slots = (max(tabs) + 1) * bs
    kc = [rnd.uniform(-1, 1) for _ in range(n_slots * n_head_kv * D)]
    vc = [rnd.uniform(-1, 1) for _ in range(n_slots * n_head_kv * D)]
    q = [rnd.uniform(-1, 1) for _ in range(n * n_head * D)]
    scale = 1 / math.sqrt(D)
    out = [float('nan')] * (n * n_head * D)
    kernel(MT, D, BN, gs, q, kc, vc, bs, pos, tab_off, tabs, n, n_head, n_head_kv, scale * math.log2(math.e), out)
    err = 0.0
    for t in range(n):
        tab = tabs[tab_off[t]:]
        for h in range(n_head):
            kvh = h // group
            qrow = q[(t * n_head + h) * D:(t * n_head + h + 1) * D]
            rows = [((tab[p // bs] * bs + p % bs) * n_head_kv + kvh) * D for p in range(pos[t] + 1)]
            sc = [scale * sum(qrow[d] * kc[r + d] for d in range(D)) for r in rows]
            mx = max(sc)
            w = [math.exp(x - mx) for x in sc]
            z = sum(w)
            for d in range(D):
                ref = sum(wi * vc[r + d] for wi, r in zip(w, rows)) / z
                got = out[(t * n_head + h) * D + d]
                err = max(err, abs(got - ref) if got == got else math.inf)
    print(f"MT={MT} D={D} heads {n_head}/{n_head_kv} (GQ {1 << gs}) seqs {seqs}: max |err| {err:.1e}")
    return err


if __name__ == "__main__":
    errs = [
        case(2, 64, 4, 2, [(30, 40), (0, 30)]),   # two sequences in a tile; 2 key tiles; GQ 2
        case(2, 64, 8, 1, [(70, 20)]),            # GQ 8: 16 entries a block, 3 blocks
        case(2, 128, 1, 1, [(100, 12)]),          # head dim 128, no GQA, one block mostly idle rows
        case(1, 64, 4, 2, [(30, 40), (0, 30)]),   # the mainline's shape, same checks
    ]
    print("OK" if max(errs) < 1e-9 else "FAILED")
