// The direct-load GEMV (kernels/cuda/quant_gemv/gemv_direct.h) and the repacked Q8_0 layout.
//
// Host-only (run in CI, no GPU): the chunk decoders against the CPU's, bit for bit; the plan of every
// K3 shape (enough warps to fill the GPU, a function of the shape only); bad arguments refused before
// anything touches the device.
// GPU (skip without a device): the repack is exact (the repacked weights, dequantized on the device
// with the GEMV's own decoder, equal quant::DequantizeRow bit for bit, and the bytes sit where the
// header says); the product against quant::MatMul on every K3 decode shape for M = 1, 2, 3, 4, 8 with
// y poisoned with NaN, padding (y_stride > rows) left untouched; batch invariance (token t of any
// batch is bit-identical to the M = 1 call on that token, and to every other run); a CUDA-graph
// replay identical to the direct call.
//
// Tolerance per output: 3e-5 · Σ_c |w_c x_c|, as for QuantGemv (quant_gemv_test.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/gemv_direct_formats.cuh"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/dot.h"
#include "kernels/quant/half.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/quant_random.h"

namespace k3::cuda::testing {
namespace {

using quant::GgmlType;

// The K3 decode products (rows = outputs, cols = inputs), Q8_0.
struct ShapeRC {
  int64_t rows, cols;
  const char* name;
};
const ShapeRC kK3Shapes[] = {
    {12288, 7168, "kda q/k/v/g 7168->12288"}, {7168, 12288, "attn_output 12288->7168"},
    {3584, 7168, "7168->3584"},               {7168, 3584, "3584->7168"},
    {33792, 7168, "dense ffn 7168->33792"},   {7168, 33792, "dense ffn down 33792->7168"},
    {163840, 7168, "lm head 7168->163840"},   {96, 7168, "7168->96"},
    {128, 7168, "7168->128"},                 {12288, 128, "128->12288"},
    {1536, 7168, "q_a 7168->1536"},           {12288, 1536, "q_b 1536->12288"},
    {576, 7168, "kv_a 7168->576"},
};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- host only ---------------------------------------------------------------------------------

TEST(QuantGemvDirectHostTest, ChunkDecodersMatchCpuBitForBit) {
  std::mt19937_64 rng(99);
  for (int iter = 0; iter < 20000; ++iter) {
    const uint64_t lo = rng(), hi = rng();
    const uint4 c = make_uint4(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi),
                               static_cast<uint32_t>(hi >> 32));
    uint8_t bytes[16];
    std::memcpy(bytes, &lo, 8);
    std::memcpy(bytes + 8, &hi, 8);
    float q[16], f32[4], f16[8], bf16[8];
    direct::ConvertChunk<direct::DirectQ8_0>(c, q);
    direct::ConvertChunk<direct::DirectF32>(c, f32);
    direct::ConvertChunk<direct::DirectF16>(c, f16);
    direct::ConvertChunk<direct::DirectBF16>(c, bf16);
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(Bits(q[i]), Bits(static_cast<float>(static_cast<int8_t>(bytes[i])))) << "q8 byte " << i;
    }
    for (int i = 0; i < 4; ++i) {
      float want;
      std::memcpy(&want, bytes + 4 * i, 4);
      ASSERT_EQ(Bits(f32[i]), Bits(want));
    }
    for (int i = 0; i < 8; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      const float want16 = quant::F16ToF32(h), want_bf = quant::Bf16ToF32(h);
      if (std::isnan(want16)) {
        ASSERT_TRUE(std::isnan(f16[i]));
      } else {
        ASSERT_EQ(Bits(f16[i]), Bits(want16)) << "f16 " << h;
      }
      ASSERT_EQ(Bits(bf16[i]), Bits(want_bf)) << "bf16 " << h;
    }
  }
}

TEST(QuantGemvDirectHostTest, PlanFillsTheGpuForEveryK3Shape) {
  for (const ShapeRC& s : kK3Shapes) {
    SCOPED_TRACE(s.name);
    QuantGemvDirectPlan p;
    ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kQ8_0, s.rows, s.cols, &p));
    EXPECT_EQ(p.elems_per_chunk, 16);
    EXPECT_EQ(p.chunks, s.cols / 16);
    EXPECT_GE(p.slices, 1);
    EXPECT_LE(p.slices, p.steps);  // every slice holds at least one step
    const int64_t groups = (s.rows + p.rows_per_warp - 1) / p.rows_per_warp;
    EXPECT_EQ(p.blocks, (groups + p.groups_per_block - 1) / p.groups_per_block);
    EXPECT_EQ(p.items_per_block, p.groups_per_block * p.slices);
    // At least ~8 warps' worth of items per SM of an H200 (132 SMs), and blocks on most SMs.
    EXPECT_GE(groups * p.slices, 1024) << "items";
    EXPECT_GE(p.blocks, 96);
  }
  QuantGemvDirectPlan router;
  ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kF32, 896, 7168, &router));
  EXPECT_GE((896 + router.rows_per_warp - 1) / router.rows_per_warp * router.slices, 1024);
}

TEST(QuantGemvDirectHostTest, ForcedCutIsBoundedAndDefaultsToThePlan) {
  QuantGemvDirectPlan plan, with;
  ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kQ8_0, 6144, 7168, &plan));
  ASSERT_TRUE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 0, 0, &with));
  EXPECT_EQ(with.slices, plan.slices);
  EXPECT_EQ(with.groups_per_block, plan.groups_per_block);
  EXPECT_EQ(with.blocks, plan.blocks);
  ASSERT_TRUE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 2, 0, &with));
  EXPECT_EQ(with.slices, 2);
  EXPECT_EQ(with.groups_per_block, 1);  // wide (4 rows per warp): a block is one row group
  ASSERT_TRUE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 96, 7168, 2, 0, &with));
  EXPECT_EQ(with.rows_per_warp, 1);
  EXPECT_EQ(with.groups_per_block, 4);  // narrow: 8 / slices
  ASSERT_TRUE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 0, 3, &with));
  EXPECT_EQ(with.slices, plan.slices);
  EXPECT_EQ(with.groups_per_block, 3);
  EXPECT_EQ(with.items_per_block, 3 * plan.slices);
  EXPECT_EQ(with.blocks, (6144 / 4 + 2) / 3);
  // 7168 columns are 14 steps: at most 14 slices; at most 64 groups and 256 items per block.
  EXPECT_TRUE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 14, 16, &with));
  EXPECT_FALSE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 15, 1, &with));
  EXPECT_FALSE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, -1, 1, &with));
  EXPECT_FALSE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 1, 65, &with));
  EXPECT_FALSE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 8, 64, &with));
  EXPECT_FALSE(QuantGemvDirectPlanWith(GgmlType::kQ8_0, 6144, 7168, 1, -2, &with));
}

TEST(QuantGemvDirectHostTest, RejectsBadArgumentsWithoutLaunching) {
  // Validation happens before any CUDA call: fake, aligned device pointers are never touched.
  alignas(16) static float fake[64];
  QuantGemvDirectParams p;
  p.type = GgmlType::kQ8_0;
  p.weight = fake;
  p.rows = 4;
  p.cols = 256;
  p.x = fake;
  p.x_stride = 256;
  p.y = fake;
  p.y_stride = 4;
  p.n_tokens = 1;
  auto expect = [&](const QuantGemvDirectParams& bad, cudaError_t want, const char* what) {
    EXPECT_EQ(QuantGemvDirect(bad, nullptr), want) << what;
  };
  QuantGemvDirectParams bad = p;
  bad.type = GgmlType::kQ4_0;
  expect(bad, cudaErrorInvalidValue, "unsupported type");
  bad = p;
  bad.plan_slices = 2;  // 256 columns are one step: one slice at most
  expect(bad, cudaErrorInvalidValue, "forced slices past the steps");
  bad = p;
  bad.plan_groups_per_block = 65;
  expect(bad, cudaErrorInvalidValue, "forced groups per block");
  bad = p;
  bad.cols = 240;  // not whole Q8_0 blocks
  expect(bad, cudaErrorInvalidValue, "cols % 32");
  bad = p;
  bad.cols = 0;
  expect(bad, cudaErrorInvalidValue, "cols 0");
  bad = p;
  bad.rows = -1;
  expect(bad, cudaErrorInvalidValue, "rows < 0");
  bad = p;
  bad.n_tokens = -1;
  expect(bad, cudaErrorInvalidValue, "n_tokens < 0");
  bad = p;
  bad.x_stride = 254;
  expect(bad, cudaErrorInvalidValue, "x_stride < cols");
  bad = p;
  bad.x_stride = 258;
  expect(bad, cudaErrorInvalidValue, "x_stride % 4");
  bad = p;
  bad.y_stride = 3;
  expect(bad, cudaErrorInvalidValue, "y_stride < rows");
  bad = p;
  bad.weight = nullptr;
  expect(bad, cudaErrorInvalidValue, "null weight");
  bad = p;
  bad.y = nullptr;
  expect(bad, cudaErrorInvalidValue, "null y");
  bad = p;
  bad.x = fake + 1;
  expect(bad, cudaErrorMisalignedAddress, "misaligned x");
  bad = p;
  bad.weight = fake + 2;
  expect(bad, cudaErrorMisalignedAddress, "misaligned weight");
  bad = p;
  bad.type = GgmlType::kF32;
  bad.cols = 6;
  bad.x_stride = 8;
  expect(bad, cudaErrorInvalidValue, "F32 cols % 4");
  bad = p;
  bad.type = GgmlType::kBF16;
  bad.cols = 12;
  bad.x_stride = 12;
  expect(bad, cudaErrorInvalidValue, "BF16 cols % 8");
  bad = p;
  bad.add = fake;
  bad.add_stride = 3;
  expect(bad, cudaErrorInvalidValue, "add_stride < rows");
  EXPECT_EQ(QuantGemvMma(bad, nullptr), cudaErrorInvalidValue) << "tensor-core GEMV: add_stride < rows";
  // Nothing to do: success without a launch.
  bad = p;
  bad.n_tokens = 0;
  expect(bad, cudaSuccess, "no tokens");
  bad = p;
  bad.rows = 0;
  expect(bad, cudaSuccess, "no rows");

  EXPECT_EQ(RepackQ8_0(fake, 4, 100, fake + 16, nullptr), cudaErrorInvalidValue);        // cols % 32
  EXPECT_EQ(RepackQ8_0(fake, 4, 64, fake + 1, nullptr), cudaErrorMisalignedAddress);    // dst not 16-aligned
  EXPECT_EQ(RepackQ8_0(fake, 4, 64, fake, nullptr), cudaErrorInvalidValue);             // overlap
  EXPECT_EQ(RepackQ8_0(nullptr, 4, 64, fake, nullptr), cudaErrorInvalidValue);
  EXPECT_TRUE(QuantGemvDirectSupports(GgmlType::kQ8_0));
  EXPECT_TRUE(QuantGemvDirectSupports(GgmlType::kF32));
  EXPECT_TRUE(QuantGemvDirectSupports(GgmlType::kF16));
  EXPECT_TRUE(QuantGemvDirectSupports(GgmlType::kBF16));
  EXPECT_FALSE(QuantGemvDirectSupports(GgmlType::kQ4_K));
  EXPECT_EQ(RepackedQ8_0ScaleOffset(3, 96), 512u);
  EXPECT_EQ(RepackedQ8_0Bytes(3, 96), 512u + 3 * 3 * 2);
}

// ---- GPU ---------------------------------------------------------------------------------------

// A weight matrix on the device in the layout QuantGemvDirect reads (Q8_0 repacked there), and its
// ggml bytes on the host.
struct DeviceWeights {
  DeviceWeights(GgmlType t, int64_t r, int64_t c) : type(t), rows(r), cols(c) {}
  GgmlType type;
  int64_t rows, cols;
  size_t row_bytes = 0;  // ggml row bytes
  std::vector<uint8_t> host;
  DeviceBuffer<uint8_t> direct;
};

void MakeWeights(DeviceWeights& w, std::mt19937_64& rng) {
  const quant::TypeTraits& tr = quant::Traits(w.type);
  w.row_bytes = static_cast<size_t>(w.cols / tr.block_elems) * tr.block_bytes;
  w.host = RandomQuantRows(w.type, w.rows, w.cols, rng);
  if (w.type == GgmlType::kQ8_0) {
    DeviceBuffer<uint8_t> ggml(w.host);
    w.direct.Resize(RepackedQ8_0Bytes(w.rows, w.cols));
    ASSERT_EQ(RepackQ8_0(ggml.get(), w.rows, w.cols, w.direct.get(), nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    w.direct.Resize(w.host.size());
    w.direct.Upload(w.host);
  }
}

// Runs y[0..m) = W x[t0 .. t0 + m) with y poisoned; returns y (m rows of y_stride) and checks the
// padding stayed NaN.
std::vector<float> Run(const DeviceWeights& w, const DeviceBuffer<float>& x, int64_t x_stride, int64_t t0, int64_t m,
                       int64_t y_stride, int slices = 0, int groups_per_block = 0) {
  DeviceBuffer<float> y(static_cast<size_t>(m * y_stride));
  y.Poison();
  QuantGemvDirectParams p;
  p.type = w.type;
  p.weight = w.direct.get();
  p.rows = w.rows;
  p.cols = w.cols;
  p.x = x.get() + t0 * x_stride;
  p.x_stride = x_stride;
  p.y = y.get();
  p.y_stride = y_stride;
  p.n_tokens = m;
  p.plan_slices = slices;
  p.plan_groups_per_block = groups_per_block;
  EXPECT_EQ(QuantGemvDirect(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out = y.Download();
  int64_t pad_written = 0;
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = w.rows; r < y_stride; ++r) pad_written += !std::isnan(out[t * y_stride + r]);
  }
  EXPECT_EQ(pad_written, 0) << "writes past `rows` (m " << m << ")";
  return out;
}

// The rows the CPU reference is computed for: all, or for the big matrices a sample (first and last
// 512, every 61st) so the test stays within seconds.
std::vector<int64_t> CheckedRows(int64_t rows, int64_t cols) {
  std::vector<int64_t> out;
  if (rows * cols <= (int64_t{100} << 20)) {
    for (int64_t r = 0; r < rows; ++r) out.push_back(r);
    return out;
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (r < 512 || r >= rows - 512 || r % 61 == 0) out.push_back(r);
  }
  return out;
}

// The whole check of one shape: M = 1 on each of 8 tokens (the reference results), then M = 2, 3, 4,
// 8 and a 11-token call (two passes) must reproduce them bit for bit; the M = 1 results against
// quant::MatMul within tolerance on the checked rows; every output finite.
void CheckShape(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << quant::TypeName(type) << " " << cols << " -> " << rows);
  std::mt19937_64 rng(seed);
  DeviceWeights w(type, rows, cols);
  MakeWeights(w, rng);
  if (::testing::Test::HasFatalFailure()) return;
  constexpr int64_t kTokens = 11;
  const int64_t x_stride = cols + 4, y_stride = rows + 3;
  const std::vector<float> hx = Normal(rng, kTokens * x_stride, 0.0, 1.0);
  DeviceBuffer<float> x(hx);

  std::vector<float> single(kTokens * rows);  // M = 1 on each token
  for (int64_t t = 0; t < kTokens; ++t) {
    const std::vector<float> y = Run(w, x, x_stride, t, 1, y_stride);
    std::copy(y.begin(), y.begin() + rows, single.begin() + t * rows);
  }
  int64_t nonfinite = 0;
  for (float v : single) nonfinite += !std::isfinite(v);
  EXPECT_EQ(nonfinite, 0);

  for (int64_t m : {2, 3, 4, 8, 11}) {
    for (int64_t t0 : {int64_t{0}, kTokens - m}) {
      const std::vector<float> y = Run(w, x, x_stride, t0, m, y_stride);
      for (int64_t t = 0; t < m; ++t) {
        EXPECT_TRUE(BitEqual(y.data() + t * y_stride, single.data() + (t0 + t) * rows, rows))
            << "batch invariance: token " << t0 + t << " at position " << t << " of an M = " << m << " call";
      }
      if (m == kTokens) break;
    }
  }

  // CPU reference on the checked rows (copied into a compact matrix) for the first 8 tokens.
  const std::vector<int64_t> checked = CheckedRows(rows, cols);
  const int64_t nc = static_cast<int64_t>(checked.size());
  std::vector<uint8_t> sub(static_cast<size_t>(nc) * w.row_bytes);
  for (int64_t i = 0; i < nc; ++i) {
    std::memcpy(sub.data() + i * w.row_bytes, w.host.data() + checked[i] * w.row_bytes, w.row_bytes);
  }
  constexpr int64_t kRefTokens = 8;
  std::vector<float> ref(kRefTokens * nc), wrow(cols);
  quant::MatMul({type, sub.data(), nc, cols, w.row_bytes}, hx.data(), kRefTokens, x_stride, ref.data(), nc);
  std::vector<float> got(kRefTokens * nc);
  std::vector<double> want(kRefTokens * nc), bound(kRefTokens * nc);
  for (int64_t i = 0; i < nc; ++i) {
    quant::DequantizeRow(type, sub.data() + i * w.row_bytes, wrow.data(), cols);
    for (int64_t t = 0; t < kRefTokens; ++t) {
      double a = 0;
      const float* xt = hx.data() + t * x_stride;
      for (int64_t c = 0; c < cols; ++c) a += std::fabs(static_cast<double>(wrow[c]) * xt[c]);
      bound[t * nc + i] = 3e-5 * a + 1e-30;
      want[t * nc + i] = ref[t * nc + i];
      got[t * nc + i] = single[t * rows + checked[i]];
    }
  }
  EXPECT_TRUE(AllClose(got, want, 0.0, 0.0, &bound)) << nc << " rows checked";
}

TEST(QuantGemvDirectTest, RepackIsExact) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  // 3 x 96: the quant plane (288 bytes) is padded to 512 before the scales.
  for (const ShapeRC s : {ShapeRC{3, 96, "small"}, ShapeRC{257, 7168, "k3 width"}, ShapeRC{64, 128, "narrow"}}) {
    SCOPED_TRACE(s.name);
    const size_t row_bytes = static_cast<size_t>(s.cols / 32) * 34;
    const std::vector<uint8_t> ggml = RandomQuantRows(GgmlType::kQ8_0, s.rows, s.cols, rng);
    DeviceBuffer<uint8_t> d_ggml(ggml), d_rep(RepackedQ8_0Bytes(s.rows, s.cols));
    d_rep.Poison();
    K3_ASSERT_LAUNCH(RepackQ8_0(d_ggml.get(), s.rows, s.cols, d_rep.get(), nullptr));
    DeviceBuffer<float> d_deq(static_cast<size_t>(s.rows * s.cols));
    d_deq.Poison();
    K3_ASSERT_LAUNCH(DequantizeRepackedQ8_0(d_rep.get(), s.rows, s.cols, d_deq.get(), nullptr));
    const std::vector<float> deq = d_deq.Download();
    const std::vector<uint8_t> rep = d_rep.Download();
    std::vector<float> cpu(s.cols);
    const size_t scale_off = RepackedQ8_0ScaleOffset(s.rows, s.cols);
    int64_t bad_values = 0, bad_bytes = 0;
    for (int64_t r = 0; r < s.rows; ++r) {
      const uint8_t* row = ggml.data() + r * row_bytes;
      quant::DequantizeRow(GgmlType::kQ8_0, row, cpu.data(), s.cols);
      for (int64_t c = 0; c < s.cols; ++c) bad_values += Bits(deq[r * s.cols + c]) != Bits(cpu[c]);
      for (int64_t b = 0; b < s.cols / 32; ++b) {  // the layout of the header, byte for byte
        bad_bytes += std::memcmp(rep.data() + r * s.cols + 32 * b, row + 34 * b + 2, 32) != 0;
        bad_bytes += std::memcmp(rep.data() + scale_off + 2 * (r * (s.cols / 32) + b), row + 34 * b, 2) != 0;
      }
    }
    EXPECT_EQ(bad_values, 0) << "dequantized repacked weights differ from quant::DequantizeRow";
    EXPECT_EQ(bad_bytes, 0) << "repacked bytes not where gemv_direct.h says";
  }
}

// Matrices of one width repacked as parts (RepackQ8_0Rows) give the same bytes as the repack of
// their concatenation: the stacked projections the engine runs as one GEMV.
TEST(QuantGemvDirectTest, RepackRowsStacksParts) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  const int64_t cols = 7168, parts[3] = {5, 96, 37};  // 138 rows: the quant plane is padded before the scales
  const int64_t total = parts[0] + parts[1] + parts[2];
  const size_t row_bytes = static_cast<size_t>(cols / 32) * 34;
  const std::vector<uint8_t> ggml = RandomQuantRows(GgmlType::kQ8_0, total, cols, rng);
  DeviceBuffer<uint8_t> d_ggml(ggml), d_whole(RepackedQ8_0Bytes(total, cols)), d_parts(RepackedQ8_0Bytes(total, cols));
  d_whole.Poison();
  d_parts.Poison();
  K3_ASSERT_LAUNCH(RepackQ8_0(d_ggml.get(), total, cols, d_whole.get(), nullptr));
  int64_t row0 = 0;
  for (int64_t n : parts) {
    K3_ASSERT_LAUNCH(RepackQ8_0Rows(d_ggml.get() + row0 * row_bytes, n, cols, d_parts.get(), total, row0, nullptr));
    row0 += n;
  }
  const std::vector<uint8_t> whole = d_whole.Download(), stacked = d_parts.Download();
  const size_t quants = static_cast<size_t>(total * cols), scale_off = RepackedQ8_0ScaleOffset(total, cols);
  EXPECT_EQ(0, std::memcmp(whole.data(), stacked.data(), quants));
  EXPECT_EQ(0, std::memcmp(whole.data() + scale_off, stacked.data() + scale_off, RepackedQ8_0Bytes(total, cols) - scale_off));
  EXPECT_EQ(RepackQ8_0Rows(d_ggml.get(), 5, cols, d_parts.get(), 8, 4, nullptr), cudaErrorInvalidValue);  // past the end
}

TEST(QuantGemvDirectTest, K3ShapesQ8_0EveryM) {
  K3_REQUIRE_GPU();
  uint64_t seed = 500;
  for (const ShapeRC& s : kK3Shapes) {
    SCOPED_TRACE(s.name);
    CheckShape(GgmlType::kQ8_0, s.rows, s.cols, ++seed);
  }
}

// A forced cut (the benchmarks' search): other groups per block change nothing, bit for bit; other
// slice counts only the summation order (within the f32 bound of the plan's result), and each cut
// keeps the batch invariance (M = 4 reproduces M = 1).
TEST(QuantGemvDirectTest, ForcedCutsKeepTheValues) {
  K3_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{6144, 7168}, {1000, 3584 + 512 + 32}}) {
    SCOPED_TRACE(::testing::Message() << cols << " -> " << rows);
    std::mt19937_64 rng(rows + cols);
    DeviceWeights w(GgmlType::kQ8_0, rows, cols);
    MakeWeights(w, rng);
    if (HasFatalFailure()) return;
    const int64_t x_stride = cols, y_stride = rows;
    const std::vector<float> hx = Normal(rng, 4 * x_stride, 0.0, 1.0);
    DeviceBuffer<float> x(hx);
    QuantGemvDirectPlan plan;
    ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kQ8_0, rows, cols, &plan));
    const std::vector<float> base = testing::Run(w, x, x_stride, 0, 1, y_stride);
    // Bound: f32 reordering of the row's products, 3e-6 of Σ|w·x| (CheckShape's CPU bar is 3e-5).
    std::vector<double> want(base.begin(), base.end()), bound(rows);
    std::vector<float> wrow(cols);
    for (int64_t r = 0; r < rows; ++r) {
      quant::DequantizeRow(GgmlType::kQ8_0, w.host.data() + r * w.row_bytes, wrow.data(), cols);
      double a = 0;
      for (int64_t c = 0; c < cols; ++c) a += std::fabs(static_cast<double>(wrow[c]) * hx[c]);
      bound[r] = 3e-6 * a;
    }
    for (int slices : {1, 2, 3, plan.steps}) {
      for (int gpb : {1, 2, 5, 8}) {
        SCOPED_TRACE(::testing::Message() << "slices " << slices << ", groups per block " << gpb);
        const std::vector<float> one = testing::Run(w, x, x_stride, 0, 1, y_stride, slices, gpb);
        if (slices == plan.slices) {
          EXPECT_TRUE(BitEqual(one.data(), base.data(), rows));
        } else {
          EXPECT_TRUE(AllClose(one, want, 0.0, 0.0, &bound));
        }
        const std::vector<float> four = testing::Run(w, x, x_stride, 0, 4, y_stride, slices, gpb);
        EXPECT_TRUE(BitEqual(four.data(), one.data(), rows)) << "batch invariance";
      }
    }
  }
}

TEST(QuantGemvDirectTest, OddShapes) {
  K3_REQUIRE_GPU();
  // a partial last row group, a partial last step (66 chunks: lanes 2..31 idle in step 2), one row,
  // one block, widths below one step
  CheckShape(GgmlType::kQ8_0, 37, 1056, 1);
  CheckShape(GgmlType::kQ8_0, 1, 7168, 2);
  CheckShape(GgmlType::kQ8_0, 5, 32, 3);
  CheckShape(GgmlType::kQ8_0, 1001, 480, 4);
  CheckShape(GgmlType::kQ8_0, 4099, 2080, 5);
  CheckShape(GgmlType::kF32, 7, 900, 6);
  CheckShape(GgmlType::kBF16, 33, 136, 7);
}

TEST(QuantGemvDirectTest, RouterF32AndHalfTypes) {
  K3_REQUIRE_GPU();
  CheckShape(GgmlType::kF32, 896, 7168, 11);  // the MoE router
  CheckShape(GgmlType::kF16, 12288, 7168, 12);
  CheckShape(GgmlType::kBF16, 12288, 7168, 13);
  CheckShape(GgmlType::kBF16, 96, 7168, 14);
  CheckShape(GgmlType::kF16, 7168, 1536, 15);
}

// QuantGemvMma (tensor cores, f16 operands): against the CPU on the checked rows, twice — the exact
// product (weights and x as f32) within 2e-3 · Σ|w x| (two f16 roundings per product), and the same
// sum with w = f16(d·q) and f16(x) emulated on the host within 2e-5 · Σ|w x| (f32 accumulation
// only: a wrong operand mapping fails it by orders of magnitude); y's padding untouched; a token's
// row equal, bit for bit, whether it came alone or in a pass of 16 (batch invariance), and calls of
// more than 16 tokens (passes) equal to their 16-token pieces. shared_x: the second form
// (QuantGemvDirectParams::mma_shared_x), held to the same over 100 tokens (passes of 64 and 36: 4
// and 3 tiles of 16), each token's row equal, bit for bit, to its row in pieces of 16, 32 and 48
// tokens (1, 2, 3 tiles) and alone, and with x pre-rounded into a scratch (x_half: the same bits;
// a scratch one float short refused).
void CheckMma(int64_t rows, int64_t cols, uint64_t seed, bool shared_x) {
  SCOPED_TRACE(::testing::Message() << "mma " << cols << " -> " << rows << (shared_x ? " shared x" : ""));
  std::mt19937_64 rng(seed);
  DeviceWeights w(GgmlType::kQ8_0, rows, cols);
  MakeWeights(w, rng);
  if (::testing::Test::HasFatalFailure()) return;
  const int64_t kTokens = shared_x ? 100 : 40;
  const int64_t x_stride = cols + 4, y_stride = rows + 3;
  const std::vector<float> hx = Normal(rng, kTokens * x_stride, 0.0, 1.0);
  DeviceBuffer<float> x(hx);
  // staged: x rounded to f16 fragments once into a scratch (QuantGemvDirectParams::x_half)
  auto run = [&](int64_t t0, int64_t m, bool staged = false) {
    DeviceBuffer<float> y(static_cast<size_t>(m * y_stride));
    y.Poison();
    const size_t half_bytes = QuantGemvMmaXHalfBytes(m, cols);
    DeviceBuffer<float> scratch(staged ? half_bytes / 4 : 1);
    QuantGemvDirectParams p;
    p.type = GgmlType::kQ8_0;
    p.weight = w.direct.get();
    p.rows = rows;
    p.cols = cols;
    p.x = x.get() + t0 * x_stride;
    p.x_stride = x_stride;
    p.y = y.get();
    p.y_stride = y_stride;
    p.n_tokens = m;
    p.mma_shared_x = shared_x;
    if (staged) {
      p.x_half = scratch.get();
      p.x_half_bytes = half_bytes - 4;  // one float short: refused, nothing launched
      EXPECT_EQ(QuantGemvMma(p, nullptr), cudaErrorInvalidValue);
      p.x_half_bytes = half_bytes;
    }
    EXPECT_EQ(QuantGemvMma(p, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out = y.Download();
    int64_t pad = 0;
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t r = rows; r < y_stride; ++r) pad += !std::isnan(out[t * y_stride + r]);
    }
    EXPECT_EQ(pad, 0) << "writes past rows";
    return out;
  };
  const std::vector<float> all = run(0, kTokens);  // passes of 16, 16, 8 (shared x: 64, 36)
  std::vector<std::pair<int64_t, int64_t>> pieces = {{0, 16}, {16, 16}, {32, 8}};  // (first token, tokens)
  if (shared_x) pieces = {{0, 16}, {16, 16}, {40, 32}, {52, 48}, {84, 16}};
  for (const auto& [t0, m] : pieces) {
    const std::vector<float> piece = run(t0, m);
    for (int64_t t = 0; t < m; ++t) {
      EXPECT_TRUE(BitEqual(piece.data() + t * y_stride, all.data() + (t0 + t) * y_stride, rows))
          << "piece of " << m << " at " << t0 << ", token " << t;
    }
  }
  if (shared_x) {  // x pre-rounded into a scratch: the same bits, whole call and a piece
    const std::vector<float> staged = run(0, kTokens, true), piece = run(40, 32, true);
    for (int64_t t = 0; t < kTokens; ++t) {
      EXPECT_TRUE(BitEqual(staged.data() + t * y_stride, all.data() + t * y_stride, rows)) << "staged, token " << t;
    }
    for (int64_t t = 0; t < 32; ++t) {
      EXPECT_TRUE(BitEqual(piece.data() + t * y_stride, all.data() + (40 + t) * y_stride, rows))
          << "staged piece at 40, token " << t;
    }
  }
  for (int64_t t : shared_x ? std::vector<int64_t>{0, 5, 15, 63, 70, 99} : std::vector<int64_t>{0, 5, 15}) {
    const std::vector<float> alone = run(t, 1);
    EXPECT_TRUE(BitEqual(alone.data(), all.data() + t * y_stride, rows)) << "token " << t << " alone";
  }
  const std::vector<int64_t> checked = CheckedRows(rows, cols);
  std::vector<float> wrow(cols);
  std::vector<float> got;
  std::vector<double> want_exact, want_f16, bound_exact, bound_f16;
  const quant::TypeTraits& tr = quant::Traits(GgmlType::kQ8_0);
  for (int64_t r : checked) {
    const uint8_t* row = w.host.data() + r * w.row_bytes;
    quant::DequantizeRow(GgmlType::kQ8_0, row, wrow.data(), cols);
    for (int64_t t = 0; t < kTokens; t += 3) {
      const float* xt = hx.data() + t * x_stride;
      double exact = 0, emul = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t* blk = row + (c / 32) * tr.block_bytes;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float q = static_cast<float>(static_cast<int8_t>(blk[2 + c % 32]));
        const float w16 = quant::F16ToF32(quant::F32ToF16(quant::F16ToF32(dh) * q));
        const float x16 = quant::F16ToF32(quant::F32ToF16(xt[c]));
        exact += static_cast<double>(wrow[c]) * xt[c];
        emul += static_cast<double>(w16) * x16;
        mag += std::fabs(static_cast<double>(wrow[c]) * xt[c]);
      }
      got.push_back(all[t * y_stride + r]);
      want_exact.push_back(exact);
      want_f16.push_back(emul);
      bound_exact.push_back(2e-3 * mag + 1e-30);
      bound_f16.push_back(2e-5 * mag + 1e-30);
    }
  }
  EXPECT_TRUE(AllClose(got, want_exact, 0.0, 0.0, &bound_exact)) << "against the exact product";
  EXPECT_TRUE(AllClose(got, want_f16, 0.0, 0.0, &bound_f16)) << "against the f16-operand product";
}

TEST(QuantGemvDirectTest, MmaSmallBatches) {
  K3_REQUIRE_GPU();
  for (bool shared_x : {false, true}) {
    CheckMma(12288, 7168, 61, shared_x);  // kda q/k/v/g (shared x: 8 splits of 14 steps, one chunk)
    CheckMma(7168, 12288, 62, shared_x);  // attention output (shared x: 8 splits of 24 steps, 2 chunks)
    CheckMma(576, 7168, 63, shared_x);    // kv_a: 18 row blocks (16 slices; shared x: 2 dead warps)
    CheckMma(100, 128, 64, shared_x);     // a partial last block of rows, two steps (shared x: 2 splits)
    CheckMma(33, 64, 65, shared_x);       // one step (shared x: one split, no cluster)
    CheckMma(20480, 7168, 66, shared_x);  // 640 row blocks (7 slices; shared x: 8 splits)
  }
  // refused: cols not a multiple of 64, other types
  EXPECT_FALSE(QuantGemvMmaSupports(GgmlType::kQ8_0, 96));
  EXPECT_FALSE(QuantGemvMmaSupports(GgmlType::kF32, 128));
  EXPECT_TRUE(QuantGemvMmaSupports(GgmlType::kQ8_0, 7168));
}

// The epilogue (y = sum + add, then y += that with accumulate) against the plain product followed
// by the same f32 adds on the host, bit for bit, on every path of the kernel (one slice: the warp
// writes; several: the block's fold; R = 1), over one pass and two (11 tokens); padding untouched.
// mma: the tensor-core GEMV instead (11, 20 and 40 tokens: one pass and two, or 1..3 tiles of 16).
void CheckEpilogue(int64_t rows, int64_t cols, uint64_t seed, bool mma = false, bool shared_x = false) {
  SCOPED_TRACE(::testing::Message() << cols << " -> " << rows << (shared_x ? " shared x" : ""));
  std::mt19937_64 rng(seed);
  DeviceWeights w(GgmlType::kQ8_0, rows, cols);
  MakeWeights(w, rng);
  if (::testing::Test::HasFatalFailure()) return;
  for (int64_t m : mma ? std::vector<int64_t>{1, 11, 20, 40} : std::vector<int64_t>{1, 3, 11}) {
    const int64_t x_stride = cols, y_stride = rows + 5, add_stride = rows + 2;
    DeviceBuffer<float> x(Normal(rng, m * x_stride, 0.0, 1.0));
    auto launch = [&](const QuantGemvDirectParams& p) { return mma ? QuantGemvMma(p, nullptr) : QuantGemvDirect(p, nullptr); };
    QuantGemvDirectParams base;  // y, add and accumulate set per run
    base.type = w.type;
    base.weight = w.direct.get();
    base.rows = rows;
    base.cols = cols;
    base.x = x.get();
    base.x_stride = x_stride;
    base.y_stride = y_stride;
    base.n_tokens = m;
    base.mma_shared_x = shared_x;
    std::vector<float> plain;
    {
      DeviceBuffer<float> y(static_cast<size_t>(m * y_stride));
      y.Poison();
      QuantGemvDirectParams p = base;
      p.y = y.get();
      K3_ASSERT_LAUNCH(launch(p));
      plain = y.Download();
    }
    const std::vector<float> y0 = Normal(rng, m * y_stride, 0.0, 4.0), add = Normal(rng, m * add_stride, 0.0, 4.0);
    DeviceBuffer<float> dadd(add);
    for (int variant = 0; variant < 3; ++variant) {
      const bool use_add = variant != 1, accumulate = variant != 0;
      DeviceBuffer<float> y(y0);
      QuantGemvDirectParams p = base;
      p.y = y.get();
      p.add = use_add ? dadd.get() : nullptr;
      p.add_stride = use_add ? add_stride : 0;
      p.accumulate = accumulate;
      K3_ASSERT_LAUNCH(launch(p));
      const std::vector<float> got = y.Download();
      std::vector<float> want = y0;
      for (int64_t t = 0; t < m; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          float v = plain[t * y_stride + r];
          if (use_add) v = v + add[t * add_stride + r];
          want[t * y_stride + r] = accumulate ? y0[t * y_stride + r] + v : v;
        }
      }
      EXPECT_TRUE(BitEqual(got.data(), want.data(), static_cast<int64_t>(want.size())))
          << "M " << m << " add " << use_add << " accumulate " << accumulate << " mma " << mma;
    }
  }
}

TEST(QuantGemvDirectTest, EpilogueIsTheSeparateAdds) {
  K3_REQUIRE_GPU();
  QuantGemvDirectPlan plan;
  ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kQ8_0, 7168, 3584, &plan));
  EXPECT_GT(plan.slices, 1);
  CheckEpilogue(7168, 3584, 71);  // the MoE's routed_up: slices folded by the block
  ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kQ8_0, 16384, 512, &plan));
  EXPECT_EQ(plan.slices, 1);
  CheckEpilogue(16384, 512, 72);  // one slice: the warps write y
  ASSERT_TRUE(QuantGemvDirectPlanFor(GgmlType::kQ8_0, 96, 7168, &plan));
  EXPECT_EQ(plan.rows_per_warp, 1);
  CheckEpilogue(96, 7168, 73);  // narrow: a row per warp
  CheckEpilogue(33, 64, 74);    // a partial row group
  CheckEpilogue(7168, 3584, 75, /*mma=*/true);  // the tensor-core GEMV: several slices
  CheckEpilogue(100, 128, 76, /*mma=*/true);    // a partial block of rows
  CheckEpilogue(7168, 3584, 77, /*mma=*/true, /*shared_x=*/true);  // a cluster of 8 splits
  CheckEpilogue(100, 128, 78, /*mma=*/true, /*shared_x=*/true);    // a partial block of rows, 2 splits
  CheckEpilogue(20480, 64, 79, /*mma=*/true, /*shared_x=*/true);   // one split: no cluster
}

TEST(QuantGemvDirectTest, GraphReplayMatchesDirectCall) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  DeviceWeights w(GgmlType::kQ8_0, 576, 7168);
  MakeWeights(w, rng);
  const int64_t m = 3;
  DeviceBuffer<float> x(Normal(rng, m * 7168, 0.0, 1.0)), y1(m * 576), y2(m * 576);
  QuantGemvDirectParams p;
  p.type = w.type;
  p.weight = w.direct.get();
  p.rows = 576;
  p.cols = 7168;
  p.x = x.get();
  p.x_stride = 7168;
  p.y = y1.get();
  p.y_stride = 576;
  p.n_tokens = m;
  K3_ASSERT_LAUNCH(QuantGemvDirect(p, nullptr));
  cudaStream_t stream;
  K3_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  p.y = y2.get();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  K3_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_EQ(QuantGemvDirect(p, stream), cudaSuccess);
  K3_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  K3_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) K3_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  K3_ASSERT_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> a = y1.Download(), b = y2.Download();
  EXPECT_TRUE(BitEqual(a.data(), b.data(), static_cast<int64_t>(a.size())));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace k3::cuda::testing
