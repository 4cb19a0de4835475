#!/usr/bin/env python3
# A lane-by-lane emulation of KdaChunkedKernel (kernels/cuda/kda/kda_chunked.cu) in numpy: the
# m16n8k8 TF32 fragment layouts of the PTX ISA, the 3xTF32 splits (cvt.rna), the key/token
# permutation that lets accumulators serve as A operands, the masks and the forward substitution,
# against the token-by-token recurrence in double. Checks the kernel's index algebra on a machine
# without a GPU (not part of CI: needs numpy).
#   python3 tests/emu/kda_chunked_emu.py [TOKENS] [G_LO G_HI]   -> max relative error, output and state
# Measured (session 44): 40 tokens 2.5e-7 / 3.6e-7; 35 tokens with g in [-5, -4.99] 2.7e-7 / 1.6e-7; 200 tokens 3.3e-7 / 2.3e-7.
import numpy as np
rng = np.random.default_rng(1)
f32 = np.float32
kC, kD, kRef = 16, 128, 7
lanes = np.arange(32); gid = lanes >> 2; tig = lanes & 3

def tf32(x):
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    # round to nearest, ties away from zero, on the 13 dropped bits
    b = (b + 0x1000) & 0xFFFFE000
    return b.astype(np.uint32).view(np.float32)

def split(x):
    hi = tf32(x); lo = tf32(np.float32(x) - hi); return hi, lo

def mma(c, a, b0, b1):
    # c: [32][4], a: [32][4], b0,b1: [32] -> D = A B + C with PTX m16n8k8 tf32 layouts
    A = np.zeros((16, 8)); B = np.zeros((8, 8)); C = np.zeros((16, 8))
    for l in range(32):
        g, t = l >> 2, l & 3
        A[g, t] = a[l][0]; A[g + 8, t] = a[l][1]; A[g, t + 4] = a[l][2]; A[g + 8, t + 4] = a[l][3]
        B[t, g] = b0[l]; B[t + 4, g] = b1[l]
        C[g, 2*t] = c[l][0]; C[g, 2*t+1] = c[l][1]; C[g+8, 2*t] = c[l][2]; C[g+8, 2*t+1] = c[l][3]
    D = (A @ B + C).astype(np.float32)
    out = np.zeros((32, 4), dtype=np.float32)
    for l in range(32):
        g, t = l >> 2, l & 3
        out[l] = [D[g, 2*t], D[g, 2*t+1], D[g+8, 2*t], D[g+8, 2*t+1]]
    return out

def mma3(c, ah, al, bh0, bh1, bl0, bl1):
    c = mma(c, al, bh0, bh1); c = mma(c, ah, bl0, bl1); return mma(c, ah, bh0, bh1)

def acc_as_a(c):
    hi = np.zeros((32, 4), np.float32); lo = np.zeros((32, 4), np.float32)
    for dst, src in ((0, 0), (1, 2), (2, 1), (3, 3)):
        hi[:, dst], lo[:, dst] = split(c[:, src])
    return hi, lo

def chunked(S, q, k, g, v, beta, scale):
    # S [dk][dv] f32; q,k,g [T][dk]; v [T][dv]; beta [T]
    T = q.shape[0]; S = S.astype(np.float32).copy(); out = np.zeros((T, kD), np.float32)
    st = np.zeros((8, 16, 32, 4), np.float32)  # warp, nt, lane, e
    for w in range(8):
        col = w * 16 + gid
        for nt in range(16):
            key = nt * 8 + 2 * tig
            st[w, nt, :, 0] = S[key, col]; st[w, nt, :, 1] = S[key + 1, col]
            st[w, nt, :, 2] = S[key, col + 8]; st[w, nt, :, 3] = S[key + 1, col + 8]
    for t0 in range(0, T, kC):
        nt_ = min(kC, T - t0)
        K = np.zeros((kC, kD), np.float32); Q = K.copy(); G = K.copy(); V = K.copy(); Bt = np.zeros(kC, np.float32)
        K[:nt_] = k[t0:t0+nt_]; Q[:nt_] = q[t0:t0+nt_]; G[:nt_] = g[t0:t0+nt_]; V[:nt_] = v[t0:t0+nt_]; Bt[:nt_] = beta[t0:t0+nt_]
        b = np.cumsum(G, axis=0, dtype=np.float32)
        br, bl = b[kRef], b[kC-1]
        e = np.exp(b, dtype=np.float32); ep = np.exp(b - br, dtype=np.float32); em = np.exp(br - b, dtype=np.float32); ee = np.exp(bl - b, dtype=np.float32)
        kb_hi, kb_lo = split(K * e); qb_hi, qb_lo = split(Q * e)
        kp = K * ep; qp = Q * ep; km = K * em
        kend_hi, kend_lo = split((K * ee).T)  # [key][token]
        elast = np.exp(bl, dtype=np.float32)
        amat = np.zeros((kC, kC), np.float32); mqm = amat.copy()
        for job in range(4):
            is_a = job < 2; nb = job & 1; x = kp if is_a else qp
            acc = np.zeros((32, 4), np.float32)
            for kt in range(16):
                key = kt * 8 + 2 * tig
                a01x, a01y = x[gid, key], x[gid, key + 1]
                a23x, a23y = x[gid + 8, key], x[gid + 8, key + 1]
                bbx, bby = km[nb * 8 + gid, key], km[nb * 8 + gid, key + 1]
                ah = np.zeros((32, 4), np.float32); al = ah.copy()
                ah[:, 0], al[:, 0] = split(a01x); ah[:, 1], al[:, 1] = split(a23x)
                ah[:, 2], al[:, 2] = split(a01y); ah[:, 3], al[:, 3] = split(a23y)
                bh0, bl0 = split(bbx); bh1, bl1 = split(bby)
                acc = mma3(acc, ah, al, bh0, bh1, bl0, bl1)
            y = amat if is_a else mqm
            for ee_ in range(4):
                t = gid + 8 * (ee_ >> 1); sc = nb * 8 + 2 * tig + (ee_ & 1)
                keep = (sc < t) if is_a else (sc <= t)
                y[t, sc] = np.where(keep, acc[:, ee_], 0)
        tm = np.zeros((kC, kC), np.float32)
        for c in range(kC):
            x = np.zeros(kC, np.float32)
            for t in range(kC):
                acc = np.float32(0)
                for j in range(t): acc = np.float32(amat[t, j] * x[j] + acc)
                x[t] = 1 if t == c else (0 if t < c else -Bt[t] * acc)
            tm[:, c] = x * Bt[c]
        for w in range(8):
            col = w * 16 + gid
            W = np.zeros((2, 32, 4), np.float32); Y = W.copy()
            for kt in range(16):
                ah, al = acc_as_a(st[w, kt]); key = kt * 8 + 2 * tig
                for nb in range(2):
                    t = nb * 8 + gid
                    W[nb] = mma3(W[nb], ah, al, kb_hi[t, key], kb_hi[t, key+1], kb_lo[t, key], kb_lo[t, key+1])
                    Y[nb] = mma3(Y[nb], ah, al, qb_hi[t, key], qb_hi[t, key+1], qb_lo[t, key], qb_lo[t, key+1])
            U = np.zeros((2, 32, 4), np.float32); R = np.zeros((2, 32, 4), np.float32)
            for nb in range(2):
                t = nb * 8 + 2 * tig
                R[nb, :, 0] = V[t, col] - W[nb, :, 0]; R[nb, :, 1] = V[t+1, col] - W[nb, :, 1]
                R[nb, :, 2] = V[t, col+8] - W[nb, :, 2]; R[nb, :, 3] = V[t+1, col+8] - W[nb, :, 3]
            for kb in range(2):
                ah, al = acc_as_a(R[kb]); sc = kb * 8 + 2 * tig
                for nb in range(2):
                    bh0, bl0 = split(tm[nb*8+gid, sc]); bh1, bl1 = split(tm[nb*8+gid, sc+1])
                    U[nb] = mma3(U[nb], ah, al, bh0, bh1, bl0, bl1)
            UH = [acc_as_a(U[0]), acc_as_a(U[1])]
            for kb in range(2):
                sc = kb * 8 + 2 * tig
                for nb in range(2):
                    bh0, bl0 = split(mqm[nb*8+gid, sc]); bh1, bl1 = split(mqm[nb*8+gid, sc+1])
                    Y[nb] = mma3(Y[nb], UH[kb][0], UH[kb][1], bh0, bh1, bl0, bl1)
            for nb in range(2):
                for e_ in range(4):
                    t = nb * 8 + 2 * tig + (e_ & 1)
                    for l in range(32):
                        if t[l] < nt_: out[t0 + t[l], col[l] + 8 * (e_ >> 1)] = scale * Y[nb, l, e_]
            for ntt in range(16):
                key = ntt * 8 + 2 * tig
                st[w, ntt, :, 0] *= elast[key]; st[w, ntt, :, 1] *= elast[key+1]
                st[w, ntt, :, 2] *= elast[key]; st[w, ntt, :, 3] *= elast[key+1]
                for kb in range(2):
                    sc = kb * 8 + 2 * tig; kr = ntt * 8 + gid
                    st[w, ntt] = mma3(st[w, ntt], UH[kb][0], UH[kb][1], kend_hi[kr, sc], kend_hi[kr, sc+1], kend_lo[kr, sc], kend_lo[kr, sc+1])
    for w in range(8):
        col = w * 16 + gid
        for nt in range(16):
            key = nt * 8 + 2 * tig
            S[key, col] = st[w, nt, :, 0]; S[key + 1, col] = st[w, nt, :, 1]
            S[key, col + 8] = st[w, nt, :, 2]; S[key + 1, col + 8] = st[w, nt, :, 3]
    return S, out

def recurrent(S, q, k, g, v, beta, scale):
    S = S.astype(np.float64).copy(); T = q.shape[0]; out = np.zeros((T, kD))
    for t in range(T):
        S *= np.exp(g[t].astype(np.float64))[:, None]
        kv = S.T @ k[t]
        delta = beta[t] * (v[t] - kv)
        S += np.outer(k[t], delta)
        out[t] = scale * (S.T @ q[t])
    return S, out

import sys
T = int(sys.argv[1]) if len(sys.argv) > 1 else 40
glo, ghi = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (-5.0, 0.0)
S0 = rng.normal(0, 0.3, (kD, kD)).astype(np.float32)
def l2(x): return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
q = l2(rng.normal(size=(T, kD))); k = l2(rng.normal(size=(T, kD)))
g = rng.uniform(glo, ghi, (T, kD)).astype(np.float32); v = rng.normal(size=(T, kD)).astype(np.float32)
beta = rng.uniform(0, 1, T).astype(np.float32); scale = 1 / np.sqrt(128)
Sr, orf = recurrent(S0, q, k, g, v, beta, scale)
Sc, oc = chunked(S0, q, k, g, v, beta, scale)
print("T", T, "out max|diff|/max|ref|", np.abs(oc - orf).max() / np.abs(orf).max(), "state", np.abs(Sc - Sr).max() / np.abs(Sr).max())
