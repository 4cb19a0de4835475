// KDA's causal short convolution with SiLU (spec 4.4) on the GPU, with each sequence's history:
//   out[t][c] = silu( Σ_{j<taps} weight[c][j] · in_{t-(taps-1)+j}[c] ),  inputs before the run
// coming from the history (the previous taps-1 inputs, oldest first; zeros at sequence start),
// which is then shifted to hold the last taps-1 inputs. The same function as
// k3::cpu::ShortConvSilu for each sequence. Decode: n_seqs sequences with one token each;
// prefill: one sequence with n_tokens tokens (or several with the same count).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

inline constexpr int64_t kShortConvMaxTaps = 16;

struct ShortConvParams {
  const float* weight;          // [channels][taps]: taps contiguous per channel; tap taps-1 = current token
  float* history;               // slot s at history + s * history_slot_stride: [taps-1][channels]; updated
  int64_t history_slot_stride;  // floats between sequence slots of `history`
  const int32_t* slots = nullptr;  // [n_seqs] device: slot of each sequence, or nullptr = sequence index
  const float* in;              // [n_seqs * n_tokens][in_stride]: sequence s owns rows s*n_tokens ..
  float* out;                   // [n_seqs * n_tokens][out_stride]; may not alias `in`
  int64_t n_seqs;               // sequences in the batch
  int64_t n_tokens;             // tokens per sequence (1 in decode)
  int64_t channels;             // d_inner of this rank (heads * 128)
  int64_t taps;                 // 1..kShortConvMaxTaps (4)
  int64_t in_stride;            // floats between token rows of in
  int64_t out_stride;           // floats between token rows of out
};

cudaError_t ShortConvSilu(const ShortConvParams& p, cudaStream_t stream);

}  // namespace k3::cuda
