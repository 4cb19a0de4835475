// MLA attention of one token over a paged cache of latent rows (spec 4.5, absorbed form):
// every head scores the same 576-wide rows; V is the first kv_lora values of each row.
#pragma once

#include <cstdint>

namespace k3::cpu {

struct MlaAttentionParams {
  const float* q;             // [n_heads][row_width]: absorbed query (kv_lora) | q_pe (rope dim)
  const float* const* pages;  // cache pages; row t lives at pages[t / page_size] + (t % page_size) * page_row_stride
  int64_t page_size;          // rows per page
  int64_t page_row_stride;    // floats between consecutive rows in a page
  int64_t n_rows;             // rows 0..n_rows-1 are visible (causal: up to and incl. this token)
  int64_t row_width;          // 576
  int64_t value_width;        // 512: the latent part, also the value
  int64_t n_heads;
  float scale;                // 1/sqrt(qk_nope + rope) = 1/sqrt(192), not 1/sqrt(576)
  float* out;                 // [n_heads][value_width]: Σ_t softmax(score)_t · row_t[0:value_width]
};

void MlaAttention(const MlaAttentionParams& p);

}  // namespace k3::cpu
