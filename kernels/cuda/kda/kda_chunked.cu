// The KDA recurrence of a prefill run in chunks of 16 tokens on tensor cores (KdaDecodeParams::
// chunked; the token-by-token kernel is kda.cu). Same function as k3::cpu::KdaChunked (chunk 16):
// for a chunk starting from state S0 (dk x dv), with b_t = Σ_{s<=t} g_s per key channel,
//   W = Kb S0, Y = Qb S0                         Kb_t = k_t e^{b_t}, Qb_t = q_t e^{b_t}
//   A_ts = Σ_i k_ti k_si e^{b_ti - b_si}  (s < t),  Mq_ts = Σ_i q_ti k_si e^{b_ti - b_si}  (s <= t)
//   U = (I + diag(beta) A)^{-1} diag(beta) (V - W)            (the delta rule's u_t, all at once)
//   O = scale (Y + Mq U)
//   S = diag(e^{b_last}) S0 + Σ_t (k_t e^{b_last - b_t}) u_t^T
// A and Mq factor as (k_t e^{b_t - b_r}) · (k_s e^{b_r - b_s}) around the chunk's token r = 7, so
// every factor stays within e^{±8·|g|max} (g >= -kKdaChunkedMaxDecay: finite, and far from f32's
// denormals, for the K3 gate's lower bound -5). Every product is an m16n8k8 TF32 mma with both
// operands split in a TF32 high part and the rest (3xTF32: hi·hi + hi·lo + lo·hi), ~f32 accuracy.
//
// Block = (head, sequence), 8 warps; warp w owns value columns [16w, 16w + 16) and keeps them as
// the TRANSPOSED state S^T (16 columns x 128 keys) in mma accumulator fragments for the whole run.
// The same registers are the A operand of W^T = S^T Kb^T: an accumulator holds keys (2·tig,
// 2·tig + 1) of each 8-key tile where an A fragment holds keys (tig, tig + 4), so the key order
// inside each tile is permuted (slot tig <-> key 2·tig, slot tig + 4 <-> key 2·tig + 1) in every
// operand that meets the state over keys. A sum over keys does not depend on their order. The same
// holds for U^T over the chunk's tokens. B fragments then are pairs of adjacent floats (LDS.64).
#include "kernels/cuda/kda/kda.h"

#include <cstddef>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_ptx.cuh"

namespace k3::cuda {
namespace {

constexpr int kC = 16;              // tokens per chunk
constexpr int kD = 128;             // dk = dv
constexpr int kWarps = kD / 16;     // 8: 16 value columns each
constexpr int kThreads = kWarps * 32;
constexpr int kRef = 7;             // the chunk's reference token for A and Mq
constexpr int kRowPad = kD + 8;     // [token][key] rows: LDS.64 fragment loads hit 16 bank pairs
constexpr int kTokPad = kC + 8;     // [key][token] and [token][token] rows, likewise
constexpr int kVPad = kD + 4;       // [token][column] copy of v: the R^T reads spread over 32 banks

// One chunk's operands that do not depend on the state, made one chunk ahead (double-buffered).
struct __align__(16) KdaChunkDerived {
  float kb_hi[kC][kRowPad], kb_lo[kC][kRowPad];      // k e^{b_t}, split
  float qb_hi[kC][kRowPad], qb_lo[kC][kRowPad];      // q e^{b_t}, split
  float kend_hi[kD][kTokPad], kend_lo[kD][kTokPad];  // [key][token]: k e^{b_last - b_t}, split
  float vd[kC][kVPad];
  float elast[kD];          // e^{b_last}
  float betad[kC];
  float mq[kC][kTokPad];    // Mq, lower with the diagonal (0 elsewhere)
};

struct __align__(16) KdaChunkSmem {
  // The next chunk to derive (Prep), staged by cp.async (tokens past the run zero-filled:
  // k = q = g = v = beta = 0); in the pipelined form that is the chunk after the one in the products.
  float k[kC][kD];
  float q[kC][kD];
  float g[kC][kD];
  float v[kC][kD];
  float beta[kC];
  // The next chunk's factors of A and Mq (read only by AMq, right after Prep).
  float kp[kC][kRowPad];  // k e^{b_t - b_r}
  float qp[kC][kRowPad];  // q e^{b_t - b_r}
  float km[kC][kRowPad];  // k e^{b_r - b_t}
  float a[kC][kTokPad];   // A, strictly lower (0 elsewhere): the next chunk's, then (after T) free
  float tm[kC][kTokPad];  // T = (I + diag(beta) A)^{-1} diag(beta) of the chunk in the state products
  KdaChunkDerived d[2];   // chunk c in d[c % 2]
};

// c += a · b at ~f32 accuracy: the small terms first, then hi · hi.
__device__ __forceinline__ void Mma3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0,
                                     uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  ptx::Mma1688Tf32(c, al, bh0, bh1);
  ptx::Mma1688Tf32(c, ah, bl0, bl1);
  ptx::Mma1688Tf32(c, ah, bh0, bh1);
}
// A sum of 3xTF32 products into `out` (KdaDecodeParams::split_chains). kSplit: hi · hi and the two
// small terms in three sets of registers, three independent mma chains, added to out once in
// Finish (the small terms first); otherwise every product's three mma straight into out (Mma3: a
// dependent chain of three per step).
template <bool kSplit>
struct Acc3 {
  float (&out)[4];
  __device__ __forceinline__ explicit Acc3(float (&o)[4]) : out(o) {}
  __device__ __forceinline__ void Add(const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0, uint32_t bh1,
                                      uint32_t bl0, uint32_t bl1) {
    Mma3(out, ah, al, bh0, bh1, bl0, bl1);
  }
  __device__ __forceinline__ void Finish() {}
};
template <>
struct Acc3<true> {
  float (&out)[4];
  float hh[4] = {}, lh[4] = {}, hl[4] = {};  // ah · bh, al · bh, ah · bl
  __device__ __forceinline__ explicit Acc3(float (&o)[4]) : out(o) {}
  __device__ __forceinline__ void Add(const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0, uint32_t bh1,
                                      uint32_t bl0, uint32_t bl1) {
    ptx::Mma1688Tf32(lh, al, bh0, bh1);
    ptx::Mma1688Tf32(hl, ah, bl0, bl1);
    ptx::Mma1688Tf32(hh, ah, bh0, bh1);
  }
  __device__ __forceinline__ void Finish() {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] += hh[e] + (lh[e] + hl[e]);
  }
};
__device__ __forceinline__ void Ld2(const float* p, uint32_t& x, uint32_t& y) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  x = __float_as_uint(v.x);
  y = __float_as_uint(v.y);
}
// An accumulator fragment (cols x 8 tokens or keys, C layout) as the A operand over those 8, split.
__device__ __forceinline__ void AccAsA(const float (&c)[4], uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  ptx::SplitTf32(c[0], hi[0], lo[0]);  // (row g,     slot tig)     <- (row g,     2·tig)
  ptx::SplitTf32(c[2], hi[1], lo[1]);  // (row g + 8, slot tig)     <- (row g + 8, 2·tig)
  ptx::SplitTf32(c[1], hi[2], lo[2]);  // (row g,     slot tig + 4) <- (row g,     2·tig + 1)
  ptx::SplitTf32(c[3], hi[3], lo[3]);  // (row g + 8, slot tig + 4) <- (row g + 8, 2·tig + 1)
}

// c[nb] (columns x tokens 8 nb .. 8 nb + 7) += a · m^T over the chunk's 16 tokens s: a[kb] holds tokens
// 8 kb .. 8 kb + 7 of the A operand (AccAsA), m a [token t][token s] matrix in shared memory.
template <bool kSplit>
__device__ __forceinline__ void AddTokenProduct(float (&c)[2][4], const uint32_t (&ah)[2][4], const uint32_t (&al)[2][4],
                                                const float (*m)[kTokPad], int gid, int tig) {
  Acc3<kSplit> acc[2] = {Acc3<kSplit>(c[0]), Acc3<kSplit>(c[1])};
#pragma unroll
  for (int kb = 0; kb < 2; ++kb) {
    const int sc = kb * 8 + 2 * tig;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      const float2 bb = *reinterpret_cast<const float2*>(&m[nb * 8 + gid][sc]);
      uint32_t bh0, bl0, bh1, bl1;
      ptx::SplitTf32(bb.x, bh0, bl0);
      ptx::SplitTf32(bb.y, bh1, bl1);
      acc[nb].Add(ah[kb], al[kb], bh0, bh1, bl0, bl1);
    }
  }
  acc[0].Finish();
  acc[1].Finish();
}

__device__ __forceinline__ void CpAsync4Zfill(float* dst, const float* src, bool valid) {
  const uint32_t d = ptx::SmemAddr(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

// Prep of the chunk staged in sm (k, q, g, v, beta) into its derived arrays dn and the A / Mq
// factors: thread (key channel i, half) derives tokens [8 half, 8 half + 8) of channel i.
__device__ __forceinline__ void Prep(KdaChunkSmem& sm, KdaChunkDerived& dn, int tid) {
  const int i = tid & (kD - 1), half = tid >> 7;
  float b[kC];
  float run = 0.0f;
#pragma unroll
  for (int t = 0; t < kC; ++t) {
    run += sm.g[t][i];
    b[t] = run;
  }
  const float br = b[kRef], blast = b[kC - 1];
#pragma unroll
  for (int t = 0; t < kC; ++t) {
    if (t / (kC / 2) != half) continue;  // (t stays a constant: b in registers)
    const float kk = sm.k[t][i], qq = sm.q[t][i];
    const float e = expf(b[t]), ep = expf(b[t] - br), em = expf(br - b[t]), ee = expf(blast - b[t]);
    uint32_t hi, lo;
    ptx::SplitTf32(kk * e, hi, lo);
    dn.kb_hi[t][i] = __uint_as_float(hi);
    dn.kb_lo[t][i] = __uint_as_float(lo);
    ptx::SplitTf32(qq * e, hi, lo);
    dn.qb_hi[t][i] = __uint_as_float(hi);
    dn.qb_lo[t][i] = __uint_as_float(lo);
    sm.kp[t][i] = kk * ep;
    sm.qp[t][i] = qq * ep;
    sm.km[t][i] = kk * em;
    ptx::SplitTf32(kk * ee, hi, lo);
    dn.kend_hi[i][t] = __uint_as_float(hi);
    dn.kend_lo[i][t] = __uint_as_float(lo);
    dn.vd[t][i] = sm.v[t][i];
  }
  if (half == 0) dn.elast[i] = expf(blast);
  if (tid < kC) dn.betad[tid] = sm.beta[tid];
}

// A (warps 4, 5) and Mq (warps 6, 7) of the chunk Prep just derived: rows t = all 16 tokens,
// columns s = 8 nb .. 8 nb + 7. A into sm.a, Mq into dn.mq.
// kSplit: even and odd key tiles in their own accumulators too (six chains of 8 mma, not one of 48).
template <bool kSplit>
__device__ __forceinline__ void AMq(KdaChunkSmem& sm, KdaChunkDerived& dn, int warp, int gid, int tig) {
  const bool is_a = warp < 6;
  const int nb = warp & 1;
  const float(*x)[kRowPad] = is_a ? sm.kp : sm.qp;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  Acc3<kSplit> part[2] = {Acc3<kSplit>(acc), Acc3<kSplit>(acc)};
#pragma unroll 4
  for (int kt = 0; kt < kD / 8; ++kt) {
    const int key = kt * 8 + 2 * tig;
    float2 a01 = *reinterpret_cast<const float2*>(&x[gid][key]);
    float2 a23 = *reinterpret_cast<const float2*>(&x[gid + 8][key]);
    float2 bb = *reinterpret_cast<const float2*>(&sm.km[nb * 8 + gid][key]);
    uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
    ptx::SplitTf32(a01.x, ah[0], al[0]);
    ptx::SplitTf32(a23.x, ah[1], al[1]);
    ptx::SplitTf32(a01.y, ah[2], al[2]);
    ptx::SplitTf32(a23.y, ah[3], al[3]);
    ptx::SplitTf32(bb.x, bh0, bl0);
    ptx::SplitTf32(bb.y, bh1, bl1);
    part[kt & 1].Add(ah, al, bh0, bh1, bl0, bl1);
  }
  part[0].Finish();
  part[1].Finish();
  float(*y)[kTokPad] = is_a ? sm.a : dn.mq;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int t = gid + 8 * (e >> 1), sc = nb * 8 + 2 * tig + (e & 1);
    const bool keep = is_a ? sc < t : sc <= t;
    y[t][sc] = keep ? acc[e] : 0.0f;
  }
}

// T = (I + diag(beta) A)^{-1} diag(beta) from sm.a, column `lane` (< kC) by forward substitution.
__device__ __forceinline__ void SolveT(KdaChunkSmem& sm, const KdaChunkDerived& dc, int lane) {
  float x[kC];
#pragma unroll
  for (int t = 0; t < kC; ++t) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < t; ++j) acc = fmaf(sm.a[t][j], x[j], acc);
    x[t] = t == lane ? 1.0f : (t < lane ? 0.0f : -dc.betad[t] * acc);
  }
  const float bc = dc.betad[lane];
#pragma unroll
  for (int t = 0; t < kC; ++t) sm.tm[t][lane] = x[t] * bc;
}

// W^T = S^T Kb^T and Y^T = S^T Qb^T: this warp's 16 columns x the chunk's 16 tokens.
template <bool kSplit>
__device__ __forceinline__ void StateTimesKQ(const float (&st)[kD / 8][4], const KdaChunkDerived& dc, int tig,
                                             int gid, float (&w)[2][4], float (&yv)[2][4]) {
  Acc3<kSplit> wa[2] = {Acc3<kSplit>(w[0]), Acc3<kSplit>(w[1])};
  Acc3<kSplit> ya[2] = {Acc3<kSplit>(yv[0]), Acc3<kSplit>(yv[1])};
#pragma unroll
  for (int kt = 0; kt < kD / 8; ++kt) {
    uint32_t ah[4], al[4];
    AccAsA(st[kt], ah, al);
    const int key = kt * 8 + 2 * tig;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      const int t = nb * 8 + gid;
      uint32_t bh0, bh1, bl0, bl1;
      Ld2(&dc.kb_hi[t][key], bh0, bh1);
      Ld2(&dc.kb_lo[t][key], bl0, bl1);
      wa[nb].Add(ah, al, bh0, bh1, bl0, bl1);
      Ld2(&dc.qb_hi[t][key], bh0, bh1);
      Ld2(&dc.qb_lo[t][key], bl0, bl1);
      ya[nb].Add(ah, al, bh0, bh1, bl0, bl1);
    }
  }
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
    wa[nb].Finish();
    ya[nb].Finish();
  }
}

// U^T = (V^T - W^T) T^T, O^T = scale (Y^T + U^T Mq^T) written for tokens t0.., and the state update
// S^T = S^T diag(e^{b_last}) + U^T Kend.
// (The state update keeps one accumulator per key tile: 16 of them side by side already.)
template <bool kSplit>
__device__ __forceinline__ void FinishChunk(float (&st)[kD / 8][4], const KdaChunkSmem& sm, const KdaChunkDerived& dc,
                                            const float (&w)[2][4], float (&yv)[2][4], const KdaDecodeParams& p,
                                            int64_t row0, int64_t t0, int64_t h, int col, int gid, int tig) {
  float u[2][4] = {};
  {
    float r[2][4];
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      const int t = nb * 8 + 2 * tig;
      r[nb][0] = dc.vd[t][col] - w[nb][0];
      r[nb][1] = dc.vd[t + 1][col] - w[nb][1];
      r[nb][2] = dc.vd[t][col + 8] - w[nb][2];
      r[nb][3] = dc.vd[t + 1][col + 8] - w[nb][3];
    }
    uint32_t rh[2][4], rl[2][4];
    AccAsA(r[0], rh[0], rl[0]);
    AccAsA(r[1], rh[1], rl[1]);
    AddTokenProduct<kSplit>(u, rh, rl, sm.tm, gid, tig);
  }
  uint32_t uh[2][4], ul[2][4];
  AccAsA(u[0], uh[0], ul[0]);
  AccAsA(u[1], uh[1], ul[1]);
  AddTokenProduct<kSplit>(yv, uh, ul, dc.mq, gid, tig);
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t t = t0 + nb * 8 + 2 * tig + (e & 1);
      if (t < p.n_tokens) p.out[(row0 + t) * p.out_stride + h * kD + col + 8 * (e >> 1)] = p.scale * yv[nb][e];
    }
  }
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int key = nt * 8 + 2 * tig;
    const float e0 = dc.elast[key], e1 = dc.elast[key + 1];
    st[nt][0] *= e0;
    st[nt][1] *= e1;
    st[nt][2] *= e0;
    st[nt][3] *= e1;
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
      const int sc = kb * 8 + 2 * tig;
      uint32_t bh0, bh1, bl0, bl1;
      Ld2(&dc.kend_hi[nt * 8 + gid][sc], bh0, bh1);
      Ld2(&dc.kend_lo[nt * 8 + gid][sc], bl0, bl1);
      Mma3(st[nt], uh[kb], ul[kb], bh0, bh1, bl0, bl1);
    }
  }
}

// Block = (head, sequence). kPipelined (KdaDecodeParams::pipelined): the state-independent work
// of chunk c + 1 (Prep, A, Mq; T in the next round) runs beside the state products of chunk c, so
// its exponentials, the forward substitution and two of the four barriers leave the chain between
// chunks. Per chunk c, with chunk c's derived arrays in d[c % 2], A(c) in sm.a, chunk c + 1 staged:
//   phase 1: warp 0 solves T(c); everyone preps chunk c + 1 into d[(c + 1) % 2]; W, Y of chunk c
//   barrier; stage chunk c + 2
//   phase 2: warps 4-7 make A(c + 1) (sm.a) and Mq(c + 1); everyone finishes chunk c (U, O, S)
//   wait for chunk c + 2's copies; barrier
// Otherwise one chunk at a time in d[0] (stage, prep, A / Mq beside W / Y, T, finish: four
// barriers). Both run the same products on the same operands: the same bits.
// kSplit: KdaDecodeParams::split_chains (Acc3).
template <bool kPipelined, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1) KdaChunkedKernel(const KdaDecodeParams p) {
  extern __shared__ float4 kda_chunk_smem[];
  PdlEnter();
  KdaChunkSmem& sm = *reinterpret_cast<KdaChunkSmem*>(kda_chunk_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t h = blockIdx.x, s = blockIdx.y;
  const int64_t slot = p.slots != nullptr ? static_cast<int64_t>(p.slots[s]) : s;
  float* S = p.state + slot * p.state_slot_stride + h * kD * kD;
  const int64_t row0 = s * p.n_tokens;  // the sequence's first row of q, k, g, v, beta, out
  const int64_t n_chunks = (p.n_tokens + kC - 1) / kC;

  // Stage chunk c: 4 arrays of 16 rows x 32 16-byte pieces, and beta.
  auto issue = [&](int64_t c) {
    const int64_t t0 = c * kC;
    for (int e = tid; e < 4 * kC * (kD / 4); e += kThreads) {
      const int which = e / (kC * (kD / 4)), rest = e % (kC * (kD / 4));
      const int tt = rest / (kD / 4), piece = rest % (kD / 4);
      const bool valid = t0 + tt < p.n_tokens;
      const int64_t row = row0 + (valid ? t0 + tt : 0);
      const float* src;
      float* dst;
      if (which == 0) {
        src = p.k + row * p.qk_stride + h * kD;
        dst = &sm.k[tt][0];
      } else if (which == 1) {
        src = p.q + row * p.qk_stride + h * kD;
        dst = &sm.q[tt][0];
      } else if (which == 2) {
        src = p.g + row * p.qk_stride + h * kD;
        dst = &sm.g[tt][0];
      } else {
        src = p.v + row * p.v_stride + h * kD;
        dst = &sm.v[tt][0];
      }
      ptx::CpAsync16(ptx::SmemAddr(dst + piece * 4), src + piece * 4, valid ? 16 : 0);
    }
    if (tid < kC) {
      const bool valid = t0 + tid < p.n_tokens;
      CpAsync4Zfill(&sm.beta[tid], p.beta + (row0 + (valid ? t0 + tid : 0)) * p.beta_stride + h, valid);
    }
    ptx::CpAsyncCommit();
  };

  issue(0);
  // The warp's state columns, transposed: st[nt] = keys [8 nt, 8 nt + 8) of columns 16 w + (gid, gid + 8).
  const int col = warp * 16 + gid;
  float st[kD / 8][4];
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int key = nt * 8 + 2 * tig;
    st[nt][0] = S[key * kD + col];
    st[nt][1] = S[(key + 1) * kD + col];
    st[nt][2] = S[key * kD + col + 8];
    st[nt][3] = S[(key + 1) * kD + col + 8];
  }

  if constexpr (!kPipelined) {
    for (int64_t c = 0; c < n_chunks; ++c) {
      ptx::CpAsyncWait<0>();
      __syncthreads();  // chunk c staged and visible; chunk c - 1's derived arrays no longer read
      Prep(sm, sm.d[0], tid);
      __syncthreads();  // derived arrays visible; the staging buffer is free
      if (c + 1 < n_chunks) issue(c + 1);
      if (warp >= 4) AMq<kSplit>(sm, sm.d[0], warp, gid, tig);
      float w[2][4] = {}, yv[2][4] = {};
      StateTimesKQ<kSplit>(st, sm.d[0], tig, gid, w, yv);
      __syncthreads();  // A and Mq visible
      if (warp == 0 && lane < kC) SolveT(sm, sm.d[0], lane);
      __syncthreads();  // T visible
      FinishChunk<kSplit>(st, sm, sm.d[0], w, yv, p, row0, c * kC, h, col, gid, tig);
    }
  } else {
    // Prologue: chunk 0 derived (A and Mq too), chunk 1 staged.
    ptx::CpAsyncWait<0>();
    __syncthreads();
    Prep(sm, sm.d[0], tid);
    __syncthreads();  // chunk 0's derived arrays and factors visible; the staging buffer free
    if (n_chunks > 1) issue(1);
    if (warp >= 4) AMq<kSplit>(sm, sm.d[0], warp, gid, tig);
    ptx::CpAsyncWait<0>();
    __syncthreads();

    // One chunk; kCur = c % 2 a constant, so the two buffers are distinct arrays to the compiler.
    auto step = [&](int64_t c, auto cur_tag) {
      constexpr int kCur = decltype(cur_tag)::value;
      KdaChunkDerived& dc = sm.d[kCur];
      KdaChunkDerived& dn = sm.d[kCur ^ 1];
      const bool has_next = c + 1 < n_chunks;
      // Phase 1.
      if (warp == 0 && lane < kC) SolveT(sm, dc, lane);
      if (has_next) Prep(sm, dn, tid);
      float w[2][4] = {}, yv[2][4] = {};
      StateTimesKQ<kSplit>(st, dc, tig, gid, w, yv);
      __syncthreads();  // T(c), chunk c + 1's derived arrays and factors visible; A(c) read; staging free
      if (c + 2 < n_chunks) issue(c + 2);
      // Phase 2.
      if (has_next && warp >= 4) AMq<kSplit>(sm, dn, warp, gid, tig);
      FinishChunk<kSplit>(st, sm, dc, w, yv, p, row0, c * kC, h, col, gid, tig);
      ptx::CpAsyncWait<0>();
      __syncthreads();  // chunk c + 2 staged; A(c + 1), Mq(c + 1) visible; chunk c's arrays and T(c) read
    };
    for (int64_t c = 0; c < n_chunks; c += 2) {
      step(c, std::integral_constant<int, 0>{});
      if (c + 1 < n_chunks) step(c + 1, std::integral_constant<int, 1>{});
    }
  }

#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int key = nt * 8 + 2 * tig;
    S[key * kD + col] = st[nt][0];
    S[(key + 1) * kD + col] = st[nt][1];
    S[key * kD + col + 8] = st[nt][2];
    S[(key + 1) * kD + col + 8] = st[nt][3];
  }
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

bool KdaChunkedTakes(const KdaDecodeParams& p) {
  return p.chunked && p.n_tokens > 1 && p.dk == kD && p.dv == kD && Aligned16(p.q) && Aligned16(p.k) &&
         Aligned16(p.g) && Aligned16(p.v) && p.qk_stride % 4 == 0 && p.v_stride % 4 == 0 && p.n_heads <= 65535 &&
         p.n_seqs <= 65535;
}

cudaError_t KdaChunked(const KdaDecodeParams& p, cudaStream_t stream) {
  // The unpipelined form uses one set of derived arrays; its shared memory stops before d[1].
  const size_t smem = p.pipelined ? sizeof(KdaChunkSmem) : offsetof(KdaChunkSmem, d) + sizeof(KdaChunkDerived);
  auto* kernel = p.pipelined ? (p.split_chains ? KdaChunkedKernel<true, true> : KdaChunkedKernel<true, false>)
                              : (p.split_chains ? KdaChunkedKernel<false, true> : KdaChunkedKernel<false, false>);
  K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(p.n_seqs));
  K3_CUDA_CHECK(LaunchKernel(kernel, grid, kThreads, smem, stream, p));
  return cudaSuccess;
}

}  // namespace k3::cuda
