// Small glue kernels of the GPU engine (the layer math lives in kernels/cuda): embedding gather,
// residual add, the MLA cache append through block tables, and the MoE expand/combine. All read
// their per-sequence metadata from device arrays, so a captured graph stays valid.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace k3::engine_cuda {

// x[t][0..hidden) = row (tokens[t] - vocab_begin) of the embedding, zeros outside the band.
// `table` is the quantized band ([vocab_width][row_bytes]) of a type without lookup tables,
// or f32 rows when `type` is F32.
cudaError_t EmbedRows(quant::GgmlType type, const void* table, size_t row_bytes, int64_t vocab_begin,
                      int64_t vocab_width, const int32_t* tokens, int64_t n_tokens, int64_t hidden, float* x,
                      cudaStream_t stream);
// True when EmbedRows decodes `type` on the device (no IQ lookup tables).
bool EmbedSupports(quant::GgmlType type);

// y[i] (+)= x[i] for n values (add = false: copy).
cudaError_t AddInto(float* y, const float* x, int64_t n, bool add, cudaStream_t stream);

// The MLA cache append (spec 4.5): for each sequence s (position seq_lens[s] - 1),
//   row = rms_w(kv[s][0:lora], norm) | kv[s][lora:row_width]
// written to page block_table[s][pos / page_size], row pos % page_size of the layer's cache.
struct MlaAppendParams {
  const float* kv;             // [n_seqs][kv_stride]
  int64_t kv_stride;
  const float* norm;           // [lora]
  void* cache;                 // the layer's base: page p row r at cache + p*page_stride + r*row_stride
  bool f16;
  int64_t page_stride, row_stride, page_size;
  const int32_t* block_table;  // [n_seqs][block_table_stride]
  int64_t block_table_stride;
  const int32_t* seq_lens;     // [n_seqs], this token included
  int64_t n_seqs, lora, row_width;
  float eps;
};
cudaError_t MlaAppend(const MlaAppendParams& p, cudaStream_t stream);

// xe[t*k + j][0..width) = r[t][0..width) (every chosen expert slot of a token gets its input).
cudaError_t ExpandRows(const float* r, int64_t n_tokens, int64_t k, int64_t width, float* xe, cudaStream_t stream);

// Local expert ids: ids_local[i] = ids[i] - expert_begin, or 0 with weight 0 when outside
// [0, n_local) (another expert group's expert).
cudaError_t LocalExperts(const int32_t* ids, const float* weights, int64_t n, int64_t expert_begin,
                         int64_t n_local, int32_t* ids_local, float* weights_local, cudaStream_t stream);

// m[t][d] = Σ_j w[t][j] · ye[t*k + j][d].
cudaError_t CombineExperts(const float* ye, const float* w, int64_t n_tokens, int64_t k, int64_t width, float* m,
                           cudaStream_t stream);

}  // namespace k3::engine_cuda
