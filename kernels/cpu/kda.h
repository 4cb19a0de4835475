// Kimi Delta Attention (spec 4.4): the gated delta rule on a per-head dk x dv state, with the
// decay applied along the key index. Two forms of the same function: token by token (decode)
// and chunked (prefill: within a chunk, cumulative decays and a triangular solve).
#pragma once

#include <cstdint>

namespace k3::cpu {

struct KdaParams {
  float* state;         // [n_heads][dk][dv] f32, S[i][j]: i = key index, j = value index; updated
  const float* q;       // [n_tokens][qk_stride], head h at h*dk, L2-normalized per head
  const float* k;       // [n_tokens][qk_stride], head h at h*dk, L2-normalized per head
  const float* g;       // [n_tokens][qk_stride], head h at h*dk: log decay per key channel (<= 0)
  const float* v;       // [n_tokens][v_stride], head h at h*dv
  const float* beta;    // [n_tokens][beta_stride], one scalar per head
  float* out;           // [n_tokens][out_stride], head h at h*dv: read-out of the updated state
  int64_t qk_stride;
  int64_t v_stride;
  int64_t beta_stride;
  int64_t out_stride;
  int64_t n_heads;
  int64_t dk;           // key head dim (128)
  int64_t dv;           // value head dim (128)
  int64_t n_tokens;
  float scale;          // 1/sqrt(dk)
};

// One token at a time: S *= exp(g); delta = beta (v - S^T k); S += k delta^T; o = scale S^T q.
void KdaRecurrent(const KdaParams& p);

// The same function computed `chunk` tokens at a time (any chunk >= 1; 16 as the reference).
void KdaChunked(const KdaParams& p, int64_t chunk = 16);

}  // namespace k3::cpu
