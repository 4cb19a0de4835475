// MLA prefill attention on the GPU (spec 4.5, absorbed form) for a run of consecutive query rows
// of one sequence (or the same-sized runs of several: a batched decode step), on tensor cores. Absorbed MLA is multi-query attention: every head h of query
// row i has a row_width-wide query q[i][h], all heads score the same cached rows of the sequence
// (s_t = scale · q·row_t), V_t is the first value_width values of row_t, and row i sees cache rows
// 0 .. seq_lens[i]-1. out[i][h] = Σ_t softmax(s)_t · V_t. The same function as
// k3::cpu::MlaAttention per row, with q, the cache rows and the softmax weights rounded to f16
// (f32 accumulation, f32 softmax statistics): relative L2 error ~1e-3 per output vector.
//
// Flash-attention style: (query row, head) pairs are the M dimension of a GEMM. A block owns 64
// consecutive pairs (48 where that pads the pairs less: a decode step's 96 or 48 heads)
// (row-major: pair = row·n_heads + head) and walks the cache in tiles of 64 rows
// (up to the largest len of its pairs): S = Q·Kᵀ and O += P·V with mma.sync m16n8k16 (f16 in,
// f32 out; or, with `wgmma`, blocks of 64 pairs on Hopper's warpgroup instructions), an online softmax in between. Optionally the context of each block is cut into
// n_splits ranges (blocks of their own) that a second launch combines (flash-decoding), for runs
// too short to fill the GPU. Several sequences (n_seqs > 1, each its own block table, lens, q and
// out) are one launch: their blocks of pairs side by side, no pair of two sequences in one block.
// An f32 cache is first converted to a dense f16 copy in the
// workspace (one pass over the rows the run reads). No allocation, no host synchronization: the
// launch depends only on host-known sizes (capturable in a CUDA graph).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mla/mla_decode.h"  // MlaCacheType

namespace k3::cuda {

struct MlaPrefillParams {
  const float* q;               // [n_rows][q_row_stride]: head h at h*row_width: absorbed q (kv_lora) | q_pe (rope); 16-B aligned
  int64_t q_row_stride;         // floats between query rows (>= n_heads*row_width, multiple of 4)
  const void* cache;            // paged rows of the sequence: page p, row r at cache + block_table[p]*page_stride + r*row_stride elements; 16-B aligned
  MlaCacheType cache_type;      // f16 (the reference's) or f32 (the CPU engine's)
  int64_t page_stride;          // elements between pages (multiple of 8)
  int64_t row_stride;           // elements between rows of a page (multiple of 8)
  int64_t page_size;            // rows per page
  const int32_t* block_table;   // [n_seqs][block_table_stride] device: each sequence's pages (one table for every row of its run)
  const int32_t* seq_lens;      // [n_seqs][n_rows] device: visible cache rows of each query row (causal: its position + 1), <= max_len
  int64_t n_rows;               // query rows of the run (of each sequence)
  int64_t n_heads;              // heads of this rank (96 / tp)
  int64_t row_width;            // 576 (multiple of 64, <= 576)
  int64_t value_width;          // 512 (multiple of 16, <= 512, <= row_width)
  int64_t max_len;              // host-known bound on every seq_lens[i] (e.g. the engine's MLA bucket); larger lens are clamped to it
  float scale;                  // 1/sqrt(qk_nope + rope) = 1/sqrt(192)
  float* out;                   // [n_rows][out_row_stride]: head h at h*value_width: Σ_t softmax_t · V_t; 8-B aligned
  int64_t out_row_stride;       // floats between rows of out (>= n_heads*value_width, even)
  int n_splits;                 // context ranges per block of pairs (>= 1); MlaPrefillSplits() suggests one
  void* workspace;              // MlaPrefillWorkspaceBytes(...) bytes, device, 16-B aligned (may be null when that is 0)
  int64_t n_seqs = 1;           // sequences of the launch (> 1: f16 cache only)
  int64_t q_seq_stride = 0;     // floats between the sequences' first q rows (n_seqs > 1: >= n_rows*q_row_stride)
  int64_t out_seq_stride = 0;   // floats between the sequences' first out rows (n_seqs > 1: >= n_rows*out_row_stride)
  int64_t block_table_stride = 0;  // entries between the sequences' tables (n_seqs > 1: >= 1)
  // The warpgroup (wgmma) kernel (mla_prefill_wgmma.cu): blocks of 64 pairs, S and P·V read from
  // shared memory by the tensor cores. The same function and roundings, another summation order.
  // Only where MlaPrefillWgmmaSupports(row_width, value_width); cudaErrorInvalidValue otherwise.
  bool wgmma = false;
};

// Whether MlaPrefillParams::wgmma can be taken for these widths: an sm_90a build and K3's widths
// (row 576, value 512: two warpgroups of 256 value columns).
bool MlaPrefillWgmmaSupports(int64_t row_width, int64_t value_width);

// Bytes of workspace for a launch with these sizes (n_rows: the query rows of all its sequences,
// n_seqs · n_rows): the f16 copy of rows 0..max_len-1 for an f32 cache, plus the partial results
// of every split when n_splits > 1. 0 for an f16 cache, 1 split.
int64_t MlaPrefillWorkspaceBytes(MlaCacheType cache_type, int64_t max_len, int64_t n_rows, int64_t n_heads,
                                 int64_t row_width, int64_t value_width, int n_splits);

// A split count that fills the device for `n_seqs` runs of `n_rows` rows whose lens are at most
// `max_len` (1 when the blocks of pairs alone fill it; at least 512 cache rows per split).
int MlaPrefillSplits(int64_t n_rows, int64_t n_heads, int64_t max_len, int64_t n_seqs = 1);

cudaError_t MlaPrefill(const MlaPrefillParams& p, cudaStream_t stream);

}  // namespace k3::cuda
