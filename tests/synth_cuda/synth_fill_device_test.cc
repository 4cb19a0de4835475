// The GPU fill (worker/synth_cuda/synth_fill_device.h) against the host generator: every window
// form, every supported type, byte for byte, including real K3 tensors of the `slice` preset.
// Skips without a GPU (CI); the host half of the bit-identity is tests/synth/block_gen_test.cc.
#include "worker/synth_cuda/synth_fill_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "worker/model/quant_mix.h"
#include "worker/synth/block_fill.h"
#include "worker/synth/counter_rng.h"
#include "worker/synth/presets.h"
#include "worker/synth/synth_model.h"

namespace k3::synth {
namespace {

using quant::GgmlType;

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the GPU fill tests need one"

constexpr size_t kGuard = 64;
constexpr uint8_t kPoison = 0xab;

// A device buffer with poisoned guard bytes on both sides of `bytes` (at `offset` from a
// 256-aligned base), read back whole.
class DeviceOut {
 public:
  DeviceOut(size_t bytes, size_t offset) : bytes_(bytes), offset_(offset), total_(kGuard + offset + bytes + kGuard) {
    EXPECT_EQ(cudaMalloc(&base_, total_), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, kPoison, total_), cudaSuccess);
  }
  ~DeviceOut() { cudaFree(base_); }
  uint8_t* out() const { return base_ + kGuard + offset_; }
  // The window's bytes; fails the test when a guard byte changed.
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> all(total_);
    EXPECT_EQ(cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < kGuard + offset_; ++i) {
      if (all[i] != kPoison) {
        ADD_FAILURE() << "wrote before the window, at -" << kGuard + offset_ - i;
        break;
      }
    }
    for (size_t i = kGuard + offset_ + bytes_; i < total_; ++i) {
      if (all[i] != kPoison) {
        ADD_FAILURE() << "wrote past the window, at +" << i - (kGuard + offset_ + bytes_);
        break;
      }
    }
    return std::vector<uint8_t>(all.begin() + static_cast<ptrdiff_t>(kGuard + offset_),
                                all.begin() + static_cast<ptrdiff_t>(kGuard + offset_ + bytes_));
  }

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_, offset_, total_;
};

// The window on the host: row by row through synth::FillBlocks.
std::vector<uint8_t> HostWindow(const SynthFillParams& p) {
  const uint32_t bb = quant::Traits(p.type).block_bytes;
  std::vector<uint8_t> out(p.n_mats * p.n_rows * p.n_col_blocks * bb);
  for (uint64_t e = 0; e < p.n_mats; ++e) {
    for (uint64_t r = 0; r < p.n_rows; ++r) {
      FillBlocks(p.type, p.values, p.key, p.first_block + e * p.mat_pitch_blocks + r * p.row_pitch_blocks,
                 p.n_col_blocks, out.data() + ((e * p.n_rows + r) * p.n_col_blocks) * bb);
    }
  }
  return out;
}

// First differing block, for the message.
std::string FirstDiff(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, uint32_t bb) {
  if (want.size() != got.size()) return "sizes differ";
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      return "first difference at byte " + std::to_string(i) + " (block " + std::to_string(i / bb) + ", byte " +
             std::to_string(i % bb) + "): want " + std::to_string(want[i]) + " got " + std::to_string(got[i]);
    }
  }
  return "";
}

// Fills on the GPU at each of a few output alignments and compares with the host.
void CheckWindow(const SynthFillParams& params, const std::string& what) {
  const uint32_t bb = quant::Traits(params.type).block_bytes;
  const std::vector<uint8_t> want = HostWindow(params);
  ASSERT_EQ(SynthFillBytes(params), want.size()) << what;
  for (const size_t offset : {size_t{0}, size_t{2}, size_t{6}, size_t{14}}) {
    DeviceOut buf(want.size(), offset);
    SynthFillParams p = params;
    p.out = buf.out();
    ASSERT_EQ(SynthFillDevice(p), cudaSuccess) << what;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    const std::vector<uint8_t> got = buf.Read();
    EXPECT_TRUE(got == want) << what << " at offset " << offset << ": " << FirstDiff(want, got, bb);
  }
}

const GgmlType kTypes[] = {GgmlType::kQ8_0, GgmlType::kIQ1_S, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS,
                           GgmlType::kQ2_K, GgmlType::kQ3_K,  GgmlType::kQ4_K,    GgmlType::kQ5_K,
                           GgmlType::kQ6_K, GgmlType::kF32,   GgmlType::kF16,     GgmlType::kBF16};

class FillType : public ::testing::TestWithParam<GgmlType> {};

TEST_P(FillType, EveryWindowFormIsTheHostsBytes) {
  SKIP_WITHOUT_GPU();
  const GgmlType type = GetParam();
  ASSERT_TRUE(SynthFillDeviceSupports(type));
  const bool plain = type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
  std::vector<ValueSpec> specs;
  for (const auto& [mean, std] : {std::pair<float, float>{0.0f, 0.0167f}, {1.0f, 0.5f}, {0.0f, 2e-6f}}) {
    ValueSpec v;
    v.mean = plain ? mean : 0.0f;
    v.std = std;
    specs.push_back(v);
  }
  struct Form {
    const char* name;
    uint64_t first, n_mats, n_rows, n_col_blocks, mat_pitch, row_pitch;
  };
  const Form forms[] = {
      {"one block", 0, 1, 1, 1, 0, 0},
      {"one block far out", (uint64_t{1} << 40) + 3, 1, 1, 1, 0, 0},
      {"contiguous ragged", 13, 1, 1, 1000, 0, 0},
      {"contiguous rows", 5 * 28, 1, 37, 28, 0, 28},
      {"column band", 4 * 10 + 2, 1, 9, 3, 0, 10},
      {"column band, 1 block wide", 7, 1, 300, 1, 0, 11},
      {"stack, row band", 2 * 84 + 3 * 7, 3, 5, 7, 84, 7},
      {"stack, column band", 84 + 5, 4, 6, 4, 6 * 9, 9},
      {"stack, row and column band", 3 * 600 + 7 * 20 + 4, 5, 13, 9, 600, 20},
      {"large, many tiles", 77, 1, 1, 100003, 0, 0},
      {"large stack band", 11, 7, 129, 33, 129 * 40, 40},
  };
  for (const uint64_t key : {uint64_t{42}, TensorKey(3, "blk.1.ffn_gate_exps.weight")}) {
    for (const ValueSpec& v : specs) {
      for (const Form& f : forms) {
        SynthFillParams p;
        p.type = type;
        p.values = v;
        p.key = key;
        p.first_block = f.first;
        p.n_mats = f.n_mats;
        p.n_rows = f.n_rows;
        p.n_col_blocks = f.n_col_blocks;
        p.mat_pitch_blocks = f.mat_pitch;
        p.row_pitch_blocks = f.row_pitch;
        CheckWindow(p, std::string(quant::TypeName(type)) + " " + f.name + " std " + std::to_string(v.std) +
                           " key " + std::to_string(key));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SynthCuda, FillType, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(quant::TypeName(info.param)); });

TEST(SynthFillDevice, RefusesWhatItCannotDoAndLaunchesNothing) {
  SKIP_WITHOUT_GPU();
  DeviceOut buf(4096, 0);
  SynthFillParams ok;
  ok.type = GgmlType::kQ8_0;
  ok.values.std = 0.02f;
  ok.key = 5;
  ok.n_col_blocks = 100;
  ok.out = buf.out();
  auto expect_refused = [&](SynthFillParams p, const char* what) {
    EXPECT_EQ(SynthFillDevice(p), cudaErrorInvalidValue) << what;
  };
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kIQ3_S, GgmlType::kIQ1_M, GgmlType::kIQ4_XS, GgmlType::kQ8_K}) {
    EXPECT_FALSE(SynthFillDeviceSupports(t));
    SynthFillParams p = ok;
    p.type = t;
    expect_refused(p, "unsupported type");
  }
  {
    SynthFillParams p = ok;
    p.type = GgmlType::kF32;
    p.values = ValueSpec{ValueKind::kNegExpUniform, 0, 0, 0.0f, 2.0f};
    EXPECT_FALSE(SynthFillDeviceSupports(p.type, p.values));
    expect_refused(p, "kNegExpUniform");
    p.type = GgmlType::kQ8_0;
    expect_refused(p, "kNegExpUniform, block type");
  }
  {
    SynthFillParams p = ok;
    p.out = nullptr;
    expect_refused(p, "null out");
    p.out = buf.out() + 1;
    expect_refused(p, "odd out");
  }
  {
    SynthFillParams p = ok;
    p.n_mats = uint64_t{1} << 40;
    p.n_rows = uint64_t{1} << 30;
    expect_refused(p, "block count overflows");
    p.n_mats = 1;
    p.n_rows = 1;
    p.n_col_blocks = uint64_t{1} << 60;
    expect_refused(p, "byte count overflows");
  }
  {
    SynthFillParams p = ok;
    p.first_block = ~uint64_t{0} - 10;
    expect_refused(p, "source index overflows");
    p.first_block = 0;
    p.src_n_blocks = 99;
    expect_refused(p, "past src_n_blocks");
    p.src_n_blocks = 100;
    p.n_rows = 0;
    p.out = nullptr;
    EXPECT_EQ(SynthFillDevice(p), cudaSuccess) << "an empty window is fine";
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> got = buf.Read();
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == kPoison; })) << "something was written";
}

// ---- real K3 tensors ----

const SynthModel& Slice() {
  static const SynthModel* m = [] {
    absl::StatusOr<model::K3Config> c = PresetConfig("slice");
    EXPECT_TRUE(c.ok());
    absl::StatusOr<model::QuantMix> mix = model::QuantMix::Preset("UD-IQ1_S");
    EXPECT_TRUE(mix.ok());
    SynthOptions so;
    so.seed = 11;
    absl::StatusOr<SynthModel> s = SynthModel::Create(*c, *mix, so);
    EXPECT_TRUE(s.ok()) << s.status();
    return new SynthModel(std::move(*s));
  }();
  return *m;
}

int64_t Rows(const SynthTensor& t) { return t.spec.ne.size() > 1 ? t.spec.ne[1] : 1; }

// Window `w` of `t` on the GPU against `want`.
void CheckTensorWindow(const SynthTensor& t, const SynthTensorWindow& w, const std::vector<uint8_t>& want,
                       const std::string& what) {
  SynthFillParams p;
  ASSERT_TRUE(SynthWindowParams(t, w, nullptr, &p)) << what;
  ASSERT_EQ(SynthFillBytes(p), want.size()) << what;
  DeviceOut buf(want.size(), 0);
  ASSERT_EQ(SynthFillTensorWindow(t, w, buf.out()), cudaSuccess) << what;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> got = buf.Read();
  EXPECT_TRUE(got == want) << what << ": " << FirstDiff(want, got, t.block_bytes);
}

TEST(SynthFillDeviceK3, ExpertStackBandsAreFillRowsAndFillColumns) {
  SKIP_WITHOUT_GPU();
  const SynthModel& m = Slice();
  const SynthTensor* t = m.Find("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, GgmlType::kIQ1_S);
  const int64_t rows = Rows(*t);
  {  // experts [100, 103), rows [512, 1024) of each: an expert-parallel rank's row band
    SynthTensorWindow w{100, 3, 512, 512, 0, -1};
    std::vector<uint8_t> want(3 * 512 * t->row_bytes());
    for (int64_t e = 0; e < 3; ++e) m.FillRows(*t, (100 + e) * rows + 512, 512, want.data() + e * 512 * t->row_bytes());
    CheckTensorWindow(*t, w, want, "ffn_gate_exps experts 100..102 rows 512..1023");
  }
  {  // experts [5, 7), columns [1792, 3584) of every row: a column band of each expert
    SynthTensorWindow w{5, 2, 0, -1, 1792, 1792};
    const size_t rb = 1792 / 256 * t->block_bytes;
    std::vector<uint8_t> want(2 * rows * rb);
    for (int64_t e = 0; e < 2; ++e) {
      ASSERT_TRUE(m.FillColumns(*t, (5 + e) * rows, rows, 1792, 1792, want.data() + e * rows * rb).ok());
    }
    CheckTensorWindow(*t, w, want, "ffn_gate_exps experts 5..6 columns 1792..3583");
  }
  {  // the last expert whole
    SynthTensorWindow w{t->spec.ne[2] - 1, 1, 0, -1, 0, -1};
    std::vector<uint8_t> want(rows * t->row_bytes());
    m.FillRows(*t, (t->spec.ne[2] - 1) * rows, rows, want.data());
    CheckTensorWindow(*t, w, want, "ffn_gate_exps last expert");
  }
}

TEST(SynthFillDeviceK3, Q8_0ProjectionsRowsColumnsAndHeads) {
  SKIP_WITHOUT_GPU();
  const SynthModel& m = Slice();
  const SynthTensor* q = m.Find("blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(q->type, GgmlType::kQ8_0);
  {  // rows [1000, 1500)
    std::vector<uint8_t> want(500 * q->row_bytes());
    m.FillRows(*q, 1000, 500, want.data());
    CheckTensorWindow(*q, SynthTensorWindow{0, 1, 1000, 500, 0, -1}, want, "attn_q rows 1000..1499");
  }
  {  // columns [2688, 3584) of every row (a band of 1/8 of the hidden size)
    const int64_t c0 = 3 * q->spec.ne[0] / 8, nc = q->spec.ne[0] / 8;
    std::vector<uint8_t> want(q->n_rows() * (nc / 32) * q->block_bytes);
    ASSERT_TRUE(m.FillColumns(*q, 0, q->n_rows(), c0, nc, want.data()).ok());
    CheckTensorWindow(*q, SynthTensorWindow{0, 1, 0, -1, c0, nc}, want, "attn_q column band");
  }
  const SynthTensor* kb = m.Find("blk.3.attn_k_b.weight");  // a head stack (MLA layer)
  ASSERT_NE(kb, nullptr);
  ASSERT_EQ(kb->spec.ne.size(), 3u);
  {  // heads [12, 24), whole
    const int64_t rows = Rows(*kb);
    std::vector<uint8_t> want(12 * rows * kb->row_bytes());
    m.FillRows(*kb, 12 * rows, 12 * rows, want.data());
    CheckTensorWindow(*kb, SynthTensorWindow{12, 12, 0, -1, 0, -1}, want,
                      std::string("attn_k_b heads 12..23 (") + std::string(quant::TypeName(kb->type)) + ")");
  }
  const SynthTensor* norm = m.Find("blk.1.attn_norm.weight");  // an F32 vector
  ASSERT_NE(norm, nullptr);
  {
    std::vector<uint8_t> want(norm->n_bytes());
    m.FillBlocks(*norm, 0, norm->n_blocks, want.data());
    CheckTensorWindow(*norm, SynthTensorWindow{}, want,
                      std::string("attn_norm (") + std::string(quant::TypeName(norm->type)) + ")");
  }
}

TEST(SynthFillDeviceK3, WindowsOutsideTheTensorAreRefused) {
  SKIP_WITHOUT_GPU();
  const SynthModel& m = Slice();
  const SynthTensor* t = m.Find("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(t, nullptr);
  SynthFillParams p;
  EXPECT_FALSE(SynthWindowParams(*t, SynthTensorWindow{0, 1, 0, -1, 100, 256}, nullptr, &p)) << "unaligned column";
  EXPECT_FALSE(SynthWindowParams(*t, SynthTensorWindow{0, 1, 0, -1, 0, 300}, nullptr, &p)) << "unaligned width";
  EXPECT_FALSE(SynthWindowParams(*t, SynthTensorWindow{0, 1, 0, -1, 3584, 256}, nullptr, &p)) << "columns past";
  EXPECT_FALSE(SynthWindowParams(*t, SynthTensorWindow{895, 2, 0, -1, 0, -1}, nullptr, &p)) << "experts past";
  EXPECT_FALSE(SynthWindowParams(*t, SynthTensorWindow{0, 1, 3000, 100, 0, -1}, nullptr, &p)) << "rows past";
  EXPECT_EQ(SynthFillTensorWindow(*t, SynthTensorWindow{-1, 1, 0, -1, 0, -1}, nullptr), cudaErrorInvalidValue);
  const SynthTensor* a = m.Find("blk.0.ssm_a");
  ASSERT_NE(a, nullptr);
  DeviceOut buf(a->n_bytes(), 0);
  EXPECT_EQ(SynthFillTensorWindow(*a, SynthTensorWindow{}, buf.out()), cudaErrorInvalidValue)
      << "ssm_a is -exp(U): the host fills it";
}

// Whole big tensors: throughput, and every byte against a threaded host fill.
TEST(SynthFillDeviceK3, WholeTensorsThroughputAndBytes) {
  SKIP_WITHOUT_GPU();
  const SynthModel& m = Slice();
  for (const char* name : {"blk.1.ffn_gate_exps.weight", "token_embd.weight"}) {
    const SynthTensor* t = m.Find(name);
    ASSERT_NE(t, nullptr);
    const size_t bytes = t->n_bytes();
    uint8_t* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    ASSERT_EQ(SynthFillTensorWindow(*t, SynthTensorWindow{}, d), cudaSuccess);  // warm-up (and UnitRms)
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    constexpr int kReps = 5;
    cudaEventRecord(e0);
    for (int i = 0; i < kReps; ++i) ASSERT_EQ(SynthFillTensorWindow(*t, SynthTensorWindow{}, d), cudaSuccess);
    cudaEventRecord(e1);
    ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ms /= kReps;
    std::printf("%-28s %-6s %8.3f GB in %8.3f ms: %7.1f GB/s on the GPU\n", name,
                std::string(quant::TypeName(t->type)).c_str(), bytes / 1e9, ms, bytes / 1e6 / ms);

    std::vector<uint8_t> got(bytes), want(bytes);
    ASSERT_EQ(cudaMemcpy(got.data(), d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const auto h0 = std::chrono::steady_clock::now();
    const int n_threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    const int64_t rows = t->n_rows(), per = (rows + n_threads - 1) / n_threads;
    std::vector<std::thread> th;
    for (int i = 0; i < n_threads; ++i) {
      const int64_t r0 = i * per, r1 = std::min(rows, r0 + per);
      if (r0 < r1) th.emplace_back([&, r0, r1] { m.FillRows(*t, r0, r1 - r0, want.data() + r0 * t->row_bytes()); });
    }
    for (auto& x : th) x.join();
    const double hs = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    std::printf("%-28s host fill on %d threads: %.3f s (%.2f GB/s)\n", name, n_threads, hs, bytes / 1e9 / hs);
    EXPECT_TRUE(got == want) << name << ": " << FirstDiff(want, got, t->block_bytes);
  }
}

}  // namespace
}  // namespace k3::synth
