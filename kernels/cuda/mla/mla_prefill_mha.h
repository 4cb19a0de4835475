// MLA prefill attention in the decompressed ("MHA") form, for long prefill runs of ONE sequence:
// the same function as MlaPrefill followed by the per-head attn_v_b product, computed per head on
// decompressed keys and values instead of absorbed into the 576-wide cache rows (spec 4.5):
//
//   K_h[t] = concat( attn_k_b[h]ᵀ · lat_t (128), k_pe_t (64) )    lat_t = row_t[0:512], k_pe_t = row_t[512:576]
//   V_h[t] = attn_v_b[h] · lat_t (128)
//   o_h(i) = Σ_t softmax_t( scale · concat(q_nope, q_pe)(i, h) · K_h[t] ) · V_h[t]     over t < seq_lens[i]
//
// which is spec 4.5's o_h exactly (Q·row_t = q_nope·(k_bᵀ lat_t) + q_pe·k_pe_t, and attn_v_b is
// linear). Why: the absorbed form multiplies 576 + 512 values per (query row, head, key); this one
// 192 + 128, 3.4x fewer FLOPs, for a decompression of 2 · 512 · 128 multiply-adds per (key, head),
// paid once per run: it wins for runs of more than ~350 rows (H200, slice8: the attention of a 32k
// prefill is 2/3 of MLA's time). Decode keeps the absorbed form (one query row per sequence).
//
// Steps, all on `stream`: the cache rows 0..kv_len-1 gathered to a dense f16 copy; attn_k_b and
// attn_v_b of every head decoded to f16 (QuantDequantF16); then per group of heads (as many as
// the workspace holds at this kv_len) two strided-batched cuBLAS f16 GEMMs (f32 accumulation, f16
// out) decompress K_nope and V of the group, and a flash-attention kernel (mma.sync m16n8k16, f16
// operands, f32 accumulation and softmax) writes o_h. Accuracy: q, the cache rows, the decoded
// weights, K, V and the softmax weights rounded to f16: relative L2 error ~1e-3 per output vector,
// as MlaPrefill's. No allocation, no host synchronization (capturable when kv_len is fixed).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/mla/mla_decode.h"  // MlaCacheType
#include "kernels/quant/ggml_type.h"

namespace k3::cuda {

// The K3 widths this form is built for (the kernel's tile shapes are compile-time).
inline constexpr int64_t kMlaMhaNope = 128;    // qk_nope_head_dim
inline constexpr int64_t kMlaMhaRope = 64;     // qk_rope_head_dim
inline constexpr int64_t kMlaMhaLatent = 512;  // kv_lora_rank
inline constexpr int64_t kMlaMhaValue = 128;   // v_head_dim

struct MlaPrefillMhaParams {
  const float* q;               // [n_rows][q_row_stride]: head h at h*192: q_nope | q_pe (attn_q_b's output); 16-B aligned
  int64_t q_row_stride;         // floats between query rows (>= n_heads*192, multiple of 4)
  const void* cache;            // paged 576-wide rows: page p, row r at block_table[p]*page_stride + r*row_stride; 16-B aligned
  MlaCacheType cache_type;      // f16 or f32
  int64_t page_stride;          // elements between pages (multiple of 8 for f16, 4 for f32)
  int64_t row_stride;           // elements between rows of a page (>= 576; multiple of 8 for f16, 4 for f32)
  int64_t page_size;            // rows per page
  const int32_t* block_table;   // [ceil(kv_len/page_size)] device: the sequence's pages
  int64_t kv_len;               // host-known: rows 0..kv_len-1 of the cache exist (the run's last row's len)
  const int32_t* seq_lens;      // [n_rows] device: visible cache rows of each query row (causal), clamped to kv_len
  int64_t n_rows;               // query rows of the run
  int64_t n_heads;              // heads of this rank
  quant::GgmlType weight_type;  // type of attn_k_b and attn_v_b (QuantGemmSupports)
  const void* k_b;              // attn_k_b of this rank's heads: head h at k_b + h*k_b_head_bytes, [512][128] rows
  size_t k_b_head_bytes;        // bytes between heads (>= 512 rows)
  const void* v_b;              // attn_v_b: head h at v_b + h*v_b_head_bytes, [128][512] rows
  size_t v_b_head_bytes;        // bytes between heads (>= 128 rows)
  float scale;                  // 1/sqrt(192)
  float* out;                   // [n_rows][out_row_stride]: head h at h*128: o_h; 8-B aligned
  int64_t out_row_stride;       // floats between rows of out (>= n_heads*128, even)
  cublasHandle_t blas;          // the caller's handle; the call sets its stream
  void* workspace;              // device, 256-B aligned
  size_t workspace_bytes;       // at least MlaPrefillMhaWorkspaceBytes(kv_len, n_heads, 1)
};

// Workspace for a launch at this kv_len that decompresses `group` heads at a time: the f16
// weights of all n_heads, the dense f16 cache rows, and K_nope and V of one group.
size_t MlaPrefillMhaWorkspaceBytes(int64_t kv_len, int64_t n_heads, int64_t group);

// The most heads per group a workspace of `bytes` holds at this kv_len (at most n_heads; 0 when
// not even one fits).
int64_t MlaPrefillMhaGroup(int64_t kv_len, int64_t n_heads, size_t bytes);

// cudaErrorInvalidValue for a bad shape, pointer or a short workspace (nothing launched),
// cudaErrorMisalignedAddress for misaligned pointers or strides, cuBLAS failures mapped as in
// blas_gemm.h; otherwise the first launch error.
cudaError_t MlaPrefillMha(const MlaPrefillMhaParams& p, cudaStream_t stream);

}  // namespace k3::cuda
