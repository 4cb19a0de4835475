#include "kernels/cuda/quant_gemv/decode_host.h"

#include "kernels/cuda/quant_gemv/decode.cuh"
#include "kernels/quant/iq_tables.h"

namespace k3::cuda {

bool DecodeRowLikeGpu(quant::GgmlType type, const void* row, int64_t n, float* out) {
  qgemv::IqTables t;
  t.iq1s = quant::kIq1sGrid;
  t.iq2xxs = quant::kIq2xxsGrid;
  t.iq2xs = quant::kIq2xsGrid;
  t.iq2s = quant::kIq2sGrid;
  t.iq3xxs = quant::kIq3xxsGrid;
  t.iq3s = quant::kIq3sGrid;
  t.ksigns = quant::kKsignsIq2xs;
  t.kvalues = quant::kKvaluesIq4nl;
  const auto* src = static_cast<const uint8_t*>(row);
  return qgemv::VisitFormat(type, [&](auto f) {
    using F = decltype(f);
    for (int64_t e0 = 0; e0 < n; e0 += 8) {
      const int64_t j = e0 / F::kBlockElems;
      const int sub = static_cast<int>((e0 % F::kBlockElems) / 8);
      float a, b, v[8];
      F::Decode8(src + j * F::kBlockBytes, sub, t, a, b, v);
      for (int k = 0; k < 8; ++k) {
        // The kernel never forms a·v + b; the CPU decoders do, in this order.
        out[e0 + k] = F::kUnitScale ? v[k] : (F::kHasOffset ? a * v[k] + b : a * v[k]);
      }
    }
  });
}

}  // namespace k3::cuda
