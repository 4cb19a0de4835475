#include "kernels/quant/quantize_q8_0.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/quant/blocks.h"
#include "kernels/quant/half.h"

namespace k3::quant {

void QuantizeRowQ8_0(const float* src, void* dst, int64_t n) {
  if (n < 0 || n % kQK != 0) {
    std::fprintf(stderr, "QuantizeRowQ8_0: n = %lld is not a multiple of %d\n", static_cast<long long>(n), kQK);
    std::abort();
  }
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK, out += sizeof(BlockQ8_0)) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      const float a = std::fabs(src[j]);
      amax = amax > a ? amax : a;  // ggml's MAX(): a NaN input propagates
    }
    // ggml quantizes with the f32 reciprocal of the unrounded d, not of the stored fp16 d;
    // matching that (and roundf's ties-away-from-zero) is what makes the bytes identical.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(std::round(src[j] * id));
    std::memcpy(out, &b, sizeof(b));
  }
}

}  // namespace k3::quant
