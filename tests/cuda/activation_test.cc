// Situ, SigmoidGateMul and Sigmoid against kernels/cpu/activation.h at the K3 FFN widths.
// Tolerance 2e-6 relative + 1e-7 absolute (tanhf/expf vs libm, a few ulp).
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/activation.h"
#include "kernels/cuda/activation/activation.h"
#include "tests/cuda/cuda_test_util.h"

namespace k3::cuda::testing {
namespace {

TEST(CudaActivationTest, SituMatchesCpu) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  for (int64_t width : {int64_t{3072}, int64_t{6144}, int64_t{33792}}) {
    for (float lambda : {25.0f, 0.0f}) {
      const int64_t T = 3, gs = width + 4, us = width + 8, os = width + 12;
      const auto g = Normal(rng, T * gs, 0.0, 6.0), u = Normal(rng, T * us, 0.0, 40.0);
      DeviceBuffer<float> dg(g), du(u), dout(T * os);
      dout.Poison();
      K3_ASSERT_LAUNCH(Situ({dg.get(), du.get(), dout.get(), T, width, gs, us, os, 4.0f, lambda}, nullptr));
      const auto out = dout.Download();
      std::vector<float> got;
      std::vector<double> ref;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < width; ++i) {
          got.push_back(out[t * os + i]);
          ref.push_back(cpu::Situ(g[t * gs + i], u[t * us + i], 4.0f, lambda));
        }
      }
      EXPECT_TRUE(AllClose(got, ref, 2e-6, 1e-7)) << "width " << width << " lambda " << lambda;
    }
  }
}

TEST(CudaActivationTest, SituInPlace) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(6);
  const int64_t n = 3072;
  const auto g = Normal(rng, n, 0.0, 6.0), u = Normal(rng, n, 0.0, 40.0);
  DeviceBuffer<float> dg(g), du(u);
  K3_ASSERT_LAUNCH(Situ({dg.get(), du.get(), dg.get(), 1, n, n, n, n, 4.0f, 25.0f}, nullptr));
  const auto out = dg.Download();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = cpu::Situ(g[i], u[i], 4.0f, 25.0f);
  EXPECT_TRUE(AllClose(out, ref, 2e-6, 1e-7));
}

// More rows than a grid's y dimension holds (65535): the expert rows of a 4096-token prefill chunk
// (4096 x top-16 = 65536), here 70001 narrow rows; every row written, the padding untouched.
TEST(CudaActivationTest, SituAndGateMulPastGridRows) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  const int64_t T = 70001, width = 40, st = 44;
  const auto g = Normal(rng, T * st, 0.0, 6.0), u = Normal(rng, T * st, 0.0, 40.0);
  DeviceBuffer<float> dg(g), du(u), dout(T * st);
  dout.Poison();
  K3_ASSERT_LAUNCH(Situ({dg.get(), du.get(), dout.get(), T, width, st, st, st, 4.0f, 25.0f}, nullptr));
  K3_ASSERT_LAUNCH(SigmoidGateMul({dg.get(), du.get(), T, width, st, st}, nullptr));
  const auto out = dout.Download(), gated = dg.Download();
  std::vector<float> got, got_gated;
  std::vector<double> ref, ref_gated;
  int64_t pad_written = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      got.push_back(out[t * st + i]);
      ref.push_back(cpu::Situ(g[t * st + i], u[t * st + i], 4.0f, 25.0f));
      got_gated.push_back(gated[t * st + i]);
      ref_gated.push_back(g[t * st + i] * cpu::Sigmoid(u[t * st + i]));
    }
    for (int64_t i = width; i < st; ++i) pad_written += !std::isnan(out[t * st + i]);
  }
  EXPECT_TRUE(AllClose(got, ref, 2e-6, 1e-7));
  EXPECT_TRUE(AllClose(got_gated, ref_gated, 2e-6, 1e-7));
  EXPECT_EQ(pad_written, 0);
}

TEST(CudaActivationTest, SigmoidGateMulAndSigmoid) {
  K3_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  const int64_t T = 2, width = kDInner, xs = width + 4, gs = width;
  const auto x = Normal(rng, T * xs, 0.0, 1.0), gate = Normal(rng, T * gs, 0.0, 4.0);
  DeviceBuffer<float> dx(x), dgate(gate);
  K3_ASSERT_LAUNCH(SigmoidGateMul({dx.get(), dgate.get(), T, width, xs, gs}, nullptr));
  const auto out = dx.Download();
  std::vector<float> got;
  std::vector<double> ref;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < xs; ++i) {
      got.push_back(out[t * xs + i]);
      ref.push_back(i < width ? x[t * xs + i] * cpu::Sigmoid(gate[t * gs + i]) : x[t * xs + i]);  // padding untouched
    }
  }
  EXPECT_TRUE(AllClose(got, ref, 2e-6, 1e-30));

  const auto b = Normal(rng, kHeads * 3, 0.0, 5.0);
  DeviceBuffer<float> db(b), dy(b.size());
  dy.Poison();
  K3_ASSERT_LAUNCH(Sigmoid({db.get(), dy.get(), static_cast<int64_t>(b.size())}, nullptr));
  const auto y = dy.Download();
  std::vector<double> ref2;
  for (float v : b) ref2.push_back(cpu::Sigmoid(v));
  EXPECT_TRUE(AllClose(y, ref2, 2e-6, 1e-30));
}

}  // namespace
}  // namespace k3::cuda::testing
