// What the host side of MlaPrefill (mla_prefill.cu) hands its attention kernels: the mma.sync
// kernel there and the warpgroup (wgmma) kernel of mla_prefill_wgmma.cu. Internal to mla/.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace k3::cuda {

struct MlaPrefillArgs {
  const float* q;
  int64_t q_row_stride, q_seq_stride;
  const __half* keys;     // f16 rows: paged through `table`, or dense (table null: row t at keys + t*row_stride)
  const int32_t* table;
  int64_t table_stride;   // entries between the sequences' tables
  int64_t page_stride, row_stride;
  int page_size;
  const int32_t* seq_lens;
  int n_seqs, n_heads, n_rows, n_pairs, n_tiles, n_splits, rw, vw, max_len;  // n_rows, n_pairs, n_tiles: per sequence
  float q_mul;            // scale · log2(e): scores come out in log2 units
  float* out;
  int64_t out_row_stride, out_seq_stride;
  float* part;            // n_splits > 1: [n_splits][n_seqs·n_pairs][vw + 4]: Σ p·V (unnormalized), m (log2), l
};

// The wgmma kernel's block: 64 (row, head) pairs (n_tiles = ceil(n_pairs / 64)).
inline constexpr int kMlaWgmmaPairs = 64;
// Launches `blocks` blocks (n_seqs · n_tiles · n_splits) of the wgmma kernel on `a`, whose widths
// MlaPrefillWgmmaSupports (mla_prefill.h) has accepted.
cudaError_t LaunchMlaPrefillWgmma(const MlaPrefillArgs& a, unsigned blocks, cudaStream_t stream);

}  // namespace k3::cuda
