// MatMul: against a naive double-precision product on K3-shaped matrices, and the property the
// engine's prefill-vs-decode equality rests on: a token's outputs do not depend on the batch.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/dot.h"
#include "kernels/quant/quantize_q8_0.h"
#include "quant_test_util.h"

namespace k3::quant {
namespace {

struct Weights {
  GgmlType type;
  int64_t rows, cols;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  QuantMatrix View() const { return {type, bytes.data(), rows, cols, row_bytes}; }
};

// Random weights; `pad` extra bytes after each row exercise row_bytes > the packed size.
Weights MakeWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng, size_t pad = 0) {
  const TypeTraits& t = Traits(type);
  const size_t packed = static_cast<size_t>(cols / t.block_elems * t.block_bytes);
  Weights w{type, rows, cols, packed + pad, {}};
  w.bytes.resize(w.row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> row;
    if (type == GgmlType::kQ8_0) {
      // Real Q8_0 data, as the converter writes it.
      const auto src = testing::RandomFloats(cols, rng, 0.02f);
      row.resize(packed);
      QuantizeRowQ8_0(src.data(), row.data(), cols);
    } else {
      row = testing::RandomRow(type, cols, rng);
    }
    std::memcpy(w.bytes.data() + r * w.row_bytes, row.data(), packed);
  }
  return w;
}

// y[t][r] in double from DequantizeRow, with the f32 error bound of the 16-lane summation.
void ExpectMatchesNaive(const Weights& w, const std::vector<float>& x, int64_t n_tokens, int64_t x_stride,
                        const std::vector<float>& y, int64_t y_stride) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, w.bytes.data() + r * w.row_bytes, row.data(), w.cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double ref = 0.0, abs_sum = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double p = static_cast<double>(row[c]) * x[t * x_stride + c];
        ref += p;
        abs_sum += std::fabs(p);
      }
      const double bound = (static_cast<double>(w.cols) / 16 + 5) * 0x1p-24 * abs_sum * 1.01;
      ASSERT_LE(std::fabs(y[t * y_stride + r] - ref), bound) << "row " << r << " token " << t;
    }
  }
}

TEST(quantMatMul, Q8_0AttentionShapeMatchesNaive) {
  std::mt19937 rng(11);
  const Weights w = MakeWeights(GgmlType::kQ8_0, 320, 7168, rng);
  const int64_t n_tokens = 5;
  const auto x = testing::RandomFloats(n_tokens * 7168, rng);
  std::vector<float> y(n_tokens * 320);
  MatMul(w.View(), x.data(), n_tokens, 7168, y.data(), 320);
  ExpectMatchesNaive(w, x, n_tokens, 7168, y, 320);
}

TEST(quantMatMul, IQ1_SExpertShapeMatchesNaive) {
  std::mt19937 rng(12);
  const Weights w = MakeWeights(GgmlType::kIQ1_S, 256, 3584, rng);
  const int64_t n_tokens = 3;
  const auto x = testing::RandomFloats(n_tokens * 3584, rng);
  std::vector<float> y(n_tokens * 256);
  MatMul(w.View(), x.data(), n_tokens, 3584, y.data(), 256);
  ExpectMatchesNaive(w, x, n_tokens, 3584, y, 256);
}

// Every decodable type on a small matrix with odd row count, padded rows and strides.
TEST(quantMatMul, EveryTypeMatchesNaiveWithStrides) {
  std::mt19937 rng(13);
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = FindType(id);
    if (!t || !CanDequantize(t->type)) continue;
    SCOPED_TRACE(std::string(t->name));
    const int64_t rows = 37, cols = 1536, n_tokens = 3, x_stride = cols + 8, y_stride = rows + 3;
    const Weights w = MakeWeights(t->type, rows, cols, rng, /*pad=*/t->block_elems == 1 ? 4 : 6);
    const auto x = testing::RandomFloats(n_tokens * x_stride, rng);
    std::vector<float> y(n_tokens * y_stride, -1.0f);
    MatMul(w.View(), x.data(), n_tokens, x_stride, y.data(), y_stride);
    ExpectMatchesNaive(w, x, n_tokens, x_stride, y, y_stride);
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      for (int64_t r = rows; r < y_stride; ++r) EXPECT_EQ(y[tk * y_stride + r], -1.0f) << "wrote past rows";
    }
  }
}

// Prefill (a batch) and decode (one token at a time) must give identical bits for each token,
// and both must equal DotRow on that row; checked for the K3 must-have types.
TEST(quantMatMul, ResultOfATokenDoesNotDependOnTheBatch) {
  std::mt19937 rng(14);
  const GgmlType types[] = {GgmlType::kQ8_0, GgmlType::kIQ1_S, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS,
                            GgmlType::kQ4_K, GgmlType::kQ6_K,  GgmlType::kBF16,    GgmlType::kF32};
  for (GgmlType type : types) {
    SCOPED_TRACE(std::string(TypeName(type)));
    const int64_t rows = 203, cols = 3584, max_tokens = 9;
    const Weights w = MakeWeights(type, rows, cols, rng);
    const auto x = testing::RandomFloats(max_tokens * cols, rng);

    // Decode: each token alone.
    std::vector<float> alone(max_tokens * rows);
    for (int64_t t = 0; t < max_tokens; ++t) {
      MatMul(w.View(), x.data() + t * cols, 1, cols, alone.data() + t * rows, rows);
    }
    // Prefill in batches of several sizes (and a different output layout).
    for (int64_t batch : {2, 3, 4, 9}) {
      std::vector<float> y(max_tokens * (rows + 1));
      for (int64_t t0 = 0; t0 < max_tokens; t0 += batch) {
        const int64_t nt = std::min(batch, max_tokens - t0);
        MatMul(w.View(), x.data() + t0 * cols, nt, cols, y.data() + t0 * (rows + 1), rows + 1);
      }
      for (int64_t t = 0; t < max_tokens; ++t) {
        ASSERT_EQ(0, std::memcmp(y.data() + t * (rows + 1), alone.data() + t * rows, rows * sizeof(float)))
            << "batch " << batch << " token " << t;
      }
    }
    for (int64_t t = 0; t < max_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const float d = DotRow(type, w.bytes.data() + r * w.row_bytes, x.data() + t * cols, cols);
        ASSERT_EQ(std::bit_cast<uint32_t>(d), std::bit_cast<uint32_t>(alone[t * rows + r]));
      }
    }
  }
}

TEST(quantMatMul, EmptyInputsAreNoOps) {
  std::mt19937 rng(15);
  const Weights w = MakeWeights(GgmlType::kQ8_0, 4, 64, rng);
  std::vector<float> y(4, 42.0f);
  MatMul(w.View(), nullptr, 0, 64, y.data(), 4);
  for (float v : y) EXPECT_EQ(v, 42.0f);
}

}  // namespace
}  // namespace k3::quant
