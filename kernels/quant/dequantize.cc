#include "kernels/quant/dequantize.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/quant/decode.h"

namespace k3::quant {

bool CanDequantize(GgmlType type) { return FindDecoder(type) != nullptr; }

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const Decoder* dec = FindDecoder(type);
  if (dec == nullptr || n < 0 || n % dec->block_elems != 0) {
    std::fprintf(stderr, "DequantizeRow: bad call (type %.*s, n %lld)\n",
                 static_cast<int>(TypeName(type).size()), TypeName(type).data(),
                 static_cast<long long>(n));
    std::abort();
  }
  dec->decode(static_cast<const uint8_t*>(src), dst, n / dec->block_elems);
}

}  // namespace k3::quant
