// The GPU decoders (kernels/cuda/quant_gemv/decode.cuh), run on the host, against the CPU
// decoders (k3::quant::DequantizeRow), bit for bit, on random blocks of every type: random bytes
// everywhere, once with realistic scales and once with fully random bytes (NaN/Inf scales
// included: then both must be non-finite). Needs no GPU.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/quant_gemv/decode_host.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "kernels/quant/dequantize.h"
#include "tests/cuda/quant_random.h"

namespace k3::cuda::testing {
namespace {

// Bit-equal finite values; non-finite on both sides also passes (an Inf scale gives Inf or NaN
// depending on the order of operations; garbage in, garbage out, but never a finite surprise).
bool SameValue(float a, float b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return !std::isfinite(a) && !std::isfinite(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

void CheckType(quant::GgmlType type, const std::vector<uint8_t>& data, int64_t n) {
  std::vector<float> cpu(n), gpu(n, std::nanf(""));
  quant::DequantizeRow(type, data.data(), cpu.data(), n);
  ASSERT_TRUE(DecodeRowLikeGpu(type, data.data(), n, gpu.data()));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!SameValue(cpu[i], gpu[i])) {
      if (bad < 5) ADD_FAILURE() << quant::TypeName(type) << " element " << i << ": gpu " << gpu[i] << " cpu " << cpu[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << quant::TypeName(type);
}

TEST(QuantDecodeHostTest, EveryTypeMatchesCpuDecoderBitForBit) {
  std::mt19937_64 rng(4242);
  const int64_t n = 64 * 256;  // 64 super-blocks (512 blocks of 32)
  for (quant::GgmlType type : AllGpuTypes()) {
    SCOPED_TRACE(std::string(quant::TypeName(type)));
    EXPECT_TRUE(QuantGemvSupports(type));
    CheckType(type, RandomQuantRows(type, 1, n, rng), n);
  }
}

TEST(QuantDecodeHostTest, RawRandomBytesIncludingNonFiniteScales) {
  std::mt19937_64 rng(77);
  const int64_t n = 16 * 256;
  for (quant::GgmlType type : AllGpuTypes()) {
    SCOPED_TRACE(std::string(quant::TypeName(type)));
    const quant::TypeTraits& tr = quant::Traits(type);
    std::vector<uint8_t> data(static_cast<size_t>(n / tr.block_elems * tr.block_bytes));
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    CheckType(type, data, n);
  }
}

TEST(QuantDecodeHostTest, UnsupportedTypesAreRefused) {
  EXPECT_FALSE(QuantGemvSupports(quant::GgmlType::kQ8_K));
  EXPECT_FALSE(QuantGemvSupports(quant::GgmlType::kI32));
  float out[8];
  const uint8_t dummy[64] = {};
  EXPECT_FALSE(DecodeRowLikeGpu(quant::GgmlType::kQ8_K, dummy, 8, out));
}

}  // namespace
}  // namespace k3::cuda::testing
