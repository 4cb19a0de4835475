// MLA decode attention on the GPU (spec 4.5, absorbed form): every head of a sequence scores the
// same cached 576-wide latent rows, V being their first 512 values. Flash-decoding: the context of
// each sequence is cut into n_splits ranges; one launch computes, per (split, group of 16 heads),
// a partial softmax (running max m, sum l, unnormalized Σ p·V) over its range, a second launch
// combines the splits. The same function as k3::cpu::MlaAttention per sequence.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

enum class MlaCacheType : int { kF32 = 0, kF16 = 1 };

struct MlaDecodeParams {
  const float* q;               // [n_seqs][q_seq_stride]: head h at h*row_width: absorbed q (kv_lora) | q_pe (rope)
  int64_t q_seq_stride;         // floats between sequences of q (>= n_heads*row_width)
  const void* cache;            // paged rows: page p, row r at cache + p*page_stride + r*row_stride elements; 16-B aligned
  MlaCacheType cache_type;      // f16 (the reference's) or f32 (the CPU engine's)
  int64_t page_stride;          // elements between pages (multiple of 8)
  int64_t row_stride;           // elements between rows of a page (multiple of 8)
  int64_t page_size;            // rows per page
  const int32_t* block_table;   // [n_seqs][block_table_stride] device: page index of each page of the sequence
  int64_t block_table_stride;   // entries between sequences of block_table
  const int32_t* seq_lens;      // [n_seqs] device: visible rows (causal: positions 0..len-1, this token included)
  int64_t n_seqs;               // sequences (one query token each)
  int64_t n_heads;              // heads of this rank (96 / tp)
  int64_t row_width;            // 576 (multiple of 8, <= 1024)
  int64_t value_width;          // 512 (multiple of 4, <= 512, <= row_width)
  float scale;                  // 1/sqrt(qk_nope + rope) = 1/sqrt(192)
  float* out;                   // [n_seqs][out_seq_stride]: head h at h*value_width: Σ_t softmax_t · V_t
  int64_t out_seq_stride;       // floats between sequences of out (>= n_heads*value_width)
  int n_splits;                 // context ranges per sequence (1..8192); MlaDecodeSplits() suggests one
  float* workspace;             // MlaDecodeWorkspaceFloats(...) floats, device
};

// Floats of workspace for a launch with these sizes.
int64_t MlaDecodeWorkspaceFloats(int64_t n_seqs, int64_t n_heads, int64_t value_width, int n_splits);

// A split count that fills the device for `n_seqs` sequences of up to `max_len` rows
// (at least 32 rows per split).
int MlaDecodeSplits(int64_t n_seqs, int64_t n_heads, int64_t max_len);

cudaError_t MlaDecode(const MlaDecodeParams& p, cudaStream_t stream);

}  // namespace k3::cuda
