// The sizes of the ternary form of IQ1_S rows (the layout itself: kernels/cuda/quant_gemv/
// iq1s_ternary.h), for code that plans memory without the GPU (the fit check) as well as the
// kernels: 72 bytes per 256 weights, rows padded to an odd number of 8-byte words.
#pragma once

#include <cstdint>

namespace k3::quant {

inline constexpr int64_t kIq1sTernaryBlockBytes = 72;
// The widest rows the form is made for (the lane-per-row GEMV's; K3's experts are 3072 and 3584).
inline constexpr int64_t kIq1sTernaryMaxCols = 3584;

// Bytes of one row of `cols` weights (a multiple of 256) in the ternary form.
constexpr int64_t Iq1sTernaryRowBytes(int64_t cols) {
  const int64_t blocks = cols / 256;
  return kIq1sTernaryBlockBytes * blocks + ((9 * blocks) % 2 == 0 ? 8 : 0);
}

// Whether rows of `cols` weights are put in the form (whole blocks, no wider than the GEMV takes).
constexpr bool Iq1sTernaryTakesCols(int64_t cols) { return cols > 0 && cols % 256 == 0 && cols <= kIq1sTernaryMaxCols; }

}  // namespace k3::quant
