// Kimi Delta Attention on the GPU (spec 4.4): the decode step (one token per sequence) of the
// gated delta rule on per-head dk × dv f32 states, and the gate that feeds it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

// A run of n_tokens tokens per sequence (1 for decode, a prompt chunk for prefill), every head
// (the same function as k3::cpu::KdaRecurrent, per sequence), token by token in order:
//   S[i][j] *= exp(g[i]);  delta[j] = beta (v[j] - Σ_i S[i][j] k[i]);  S[i][j] += k[i] delta[j];
//   o[j] = scale Σ_i S[i][j] q[i]        (read out from the updated state)
struct KdaDecodeParams {
  float* state;                 // slot s at state + s * state_slot_stride: [n_heads][dk][dv] f32; updated
  int64_t state_slot_stride;    // floats between sequence slots of `state`
  const int32_t* slots = nullptr;  // [n_seqs] device: state slot per sequence, or nullptr = sequence index
  const float* q;               // [n_seqs][qk_stride]: head h at h*dk, L2-normalized per head
  const float* k;               // [n_seqs][qk_stride]: head h at h*dk, L2-normalized per head
  const float* g;               // [n_seqs][qk_stride]: head h at h*dk, log decay per key channel (<= 0)
  const float* v;               // [n_seqs][v_stride]: head h at h*dv
  const float* beta;            // [n_seqs][beta_stride]: one scalar per head
  float* out;                   // [n_seqs][out_stride]: head h at h*dv
  int64_t n_seqs;               // sequences
  int64_t n_tokens = 1;         // tokens per sequence: row s * n_tokens + t of q, k, g, v, beta, out
  int64_t n_heads;              // heads of this rank
  int64_t dk;                   // key head dim, 1..128 (128)
  int64_t dv;                   // value head dim (128)
  int64_t qk_stride;            // floats between sequence rows of q, k, g
  int64_t v_stride;             // floats between sequence rows of v
  int64_t beta_stride;          // floats between sequence rows of beta
  int64_t out_stride;           // floats between sequence rows of out
  float scale;                  // 1/sqrt(dk)
  // Runs of more than one token take the chunked tensor-core form (kda_chunked.cu: 16 tokens at a
  // time, ~f32 accuracy but not this kernel's bits) where KdaChunkedTakes. Needs every g >=
  // -kKdaChunkedMaxDecay (its decays factor around a chunk's middle token; K3's gate is >= -5).
  bool chunked = false;
  // The chunked form software-pipelined: the next chunk's state-independent work (exponentials,
  // A, Mq, T) beside this chunk's state products, two barriers a chunk instead of four; the same
  // bits, 68 KiB more shared memory (a second set of the derived arrays; kda_chunked.cu).
  bool pipelined = false;
  // The chunked form's 3xTF32 products (W, Y, A, Mq, U, Mq·U) with hi·hi and the two small terms in
  // three accumulators each (three independent mma chains, summed once at the end) instead of one
  // (three dependent mma a step): another summation order, not these bits. Built in session 50 to
  // cut the fixed-latency stalls; not yet run on a GPU, so off.
  bool split_chains = false;
};
cudaError_t KdaDecode(const KdaDecodeParams& p, cudaStream_t stream);

// The largest -g per token the chunked form takes: e^{8 · 8} stays far inside f32's range.
inline constexpr float kKdaChunkedMaxDecay = 8.0f;
// Whether KdaDecode runs `p` on the chunked form: p.chunked, a run of > 1 token, dk = dv = 128,
// q, k, g and v rows 16-byte aligned.
bool KdaChunkedTakes(const KdaDecodeParams& p);
// The chunked form itself (KdaDecode calls it; p as KdaChunkedTakes accepts).
cudaError_t KdaChunked(const KdaDecodeParams& p, cudaStream_t stream);

// The decay gate per key channel (as worker/engine/kda_layer.cc computes it):
//   x = pre + dt_bias;  g = has_lower_bound ? lower_bound · sigmoid(-(a[head] · x))   (K3: -5)
//                                          : a[head] · softplus(x)                   (kimi-linear)
struct KdaGateParams {
  const float* pre;       // [n_tokens][pre_stride]: ssm_f_b · (ssm_f_a · h), n_heads*head_dim wide
  const float* dt_bias;   // [n_heads * head_dim] ssm_dt.bias
  const float* a;         // [n_heads] ssm_a (= -exp(A_log) < 0)
  float* g;               // [n_tokens][g_stride]; may alias pre exactly
  int64_t n_tokens;       // rows
  int64_t n_heads;        // heads of this rank
  int64_t head_dim;       // 128
  int64_t pre_stride;     // floats between rows of pre
  int64_t g_stride;       // floats between rows of g
  bool has_lower_bound;   // kda.gate_lower_bound present (K3)
  float lower_bound;      // -5
};
cudaError_t KdaGate(const KdaGateParams& p, cudaStream_t stream);

}  // namespace k3::cuda
