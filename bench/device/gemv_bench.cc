// Times the dequantizing GEMV (k3::cuda::QuantGemv) at the K3 shapes with CUDA events and prints
// the achieved bandwidth against the H200 floor (4.4 TB/s measured read bandwidth here); then the
// direct-load GEMV (k3::cuda::QuantGemvDirect, repacked Q8_0) against it on the decode shapes.
//   k3_cuda_gemv_bench [out.csv] [--direct | --direct-only | --direct-sweep] [--direct-csv=path]
// (--direct adds the direct-load cases after the others, --direct-only runs just those,
// --direct-sweep times every cut of the direct GEMV for the Q8_0 and F32 ones instead.)
// Per case: weights in several copies (rotated so no launch finds its weights in the 50 MB L2),
// random data (never zeros), 20 warm-up launches, then the median of 100 individually timed
// launches ("single", launch latency included) and the mean of 100 back-to-back launches
// ("stream", launch overhead hidden). Bytes = weights + x + y (QuantGemvMinBytes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/quant_gemv/gemv_direct.h"
#include "kernels/cuda/quant_gemv/iq1s_ternary.h"
#include "kernels/cuda/quant_gemv/quant_gemv.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"

namespace {

using k3::quant::GgmlType;

constexpr double kFloorTBs = 4.4;

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

struct Case {
  const char* name;
  GgmlType type;
  int64_t rows, cols, tokens, n_mats, n_pool;
  bool shared_x;
  bool int8_x = false;  // IQ1_S: x rounded to int8 (QuantGemvParams::int8_x)
  bool row_lanes = true;  // int8_x: the lane-per-row kernel (QuantGemvParams::iq1s_row_lanes)
  bool ternary = false;   // IQ1_S in its ternary form (QuantGemvParams::iq1s_ternary), repacked on the GPU
};

// Random bytes with sane f16 scales at the block starts that hold them (decoded values finite).
void FillRandom(GgmlType type, std::vector<uint8_t>& buf, std::mt19937_64& rng) {
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(buf.data() + i, &r, 8);
  }
  const auto& tr = k3::quant::Traits(type);
  if (type == GgmlType::kF32) {
    std::normal_distribution<float> n(0.f, 1.f);
    for (size_t i = 0; i + 4 <= buf.size(); i += 4) {
      const float v = n(rng);
      std::memcpy(buf.data() + i, &v, 4);
    }
    return;
  }
  if (type == GgmlType::kF16 || type == GgmlType::kBF16) {
    for (size_t i = 0; i + 2 <= buf.size(); i += 2) {
      const uint16_t h = type == GgmlType::kF16 ? k3::quant::F32ToF16(0.01f * static_cast<float>(rng() % 200) - 1.f)
                                                : k3::quant::F32ToBf16(0.01f * static_cast<float>(rng() % 200) - 1.f);
      std::memcpy(buf.data() + i, &h, 2);
    }
    return;
  }
  std::vector<int> offs = {0};  // f16 scale fields per block
  switch (type) {
    case GgmlType::kQ2_K: offs = {80, 82}; break;
    case GgmlType::kQ3_K: offs = {108}; break;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: offs = {0, 2}; break;
    case GgmlType::kQ6_K: offs = {208}; break;
    case GgmlType::kIQ1_M: return;  // scale spread in nibbles; random is finite often enough for timing
    default: break;
  }
  const uint16_t d = k3::quant::F32ToF16(0.01f);
  for (size_t b = 0; (b + 1) * tr.block_bytes <= buf.size(); ++b) {
    for (int off : offs) std::memcpy(buf.data() + b * tr.block_bytes + off, &d, 2);
  }
}

void RunCase(const Case& c, FILE* csv) {
  const auto& tr = k3::quant::Traits(c.type);
  const size_t ggml_row_bytes = static_cast<size_t>(c.cols / tr.block_elems) * tr.block_bytes;
  const size_t row_bytes = c.ternary ? static_cast<size_t>(k3::cuda::Iq1sTernaryRowBytes(c.cols)) : ggml_row_bytes;
  const size_t mat_bytes = row_bytes * c.rows;
  const size_t mat_stride = (mat_bytes + 255) / 256 * 256;
  const size_t pool_bytes = mat_stride * c.n_pool;
  const size_t launch_weight_bytes = mat_bytes * c.n_mats;
  // copies so that consecutive launches touch >= 256 MB of distinct weights (5x the L2)
  int copies = static_cast<int>(std::ceil(256e6 / static_cast<double>(launch_weight_bytes)));
  copies = std::max(2, std::min(copies, 64));
  if (c.n_pool >= 64) copies = 1;  // a large pool of experts, drawn at random per launch, rotates by itself
  while (copies > 1 && pool_bytes * copies > (size_t{6} << 30)) --copies;

  std::mt19937_64 rng(12345);
  // the ggml rows, dense (the ternary form is made from them on the GPU, matrix by matrix)
  const size_t ggml_pool_bytes = c.ternary ? ggml_row_bytes * c.rows * c.n_pool : pool_bytes;
  std::vector<uint8_t> host(ggml_pool_bytes);
  FillRandom(c.type, host, rng);
  uint8_t* ggml = nullptr;
  if (c.ternary) {
    CHECK(cudaMalloc(&ggml, ggml_pool_bytes));
    CHECK(cudaMemcpy(ggml, host.data(), ggml_pool_bytes, cudaMemcpyHostToDevice));
  }
  std::vector<uint8_t*> w(copies);
  for (int i = 0; i < copies; ++i) {
    CHECK(cudaMalloc(&w[i], pool_bytes));
    if (!c.ternary) {
      CHECK(cudaMemcpy(w[i], host.data(), pool_bytes, cudaMemcpyHostToDevice));
      continue;
    }
    for (int64_t m = 0; m < c.n_pool; ++m) {
      CHECK(k3::cuda::Iq1sToTernary({ggml + m * ggml_row_bytes * c.rows, w[i] + m * mat_stride, c.rows, c.cols}, nullptr));
    }
  }
  if (ggml != nullptr) CHECK(cudaFree(ggml));
  const int64_t x_slots = c.shared_x ? 1 : c.n_mats;
  std::vector<float> hx(x_slots * c.tokens * c.cols);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : hx) v = nd(rng);
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&x, hx.size() * 4));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&y, static_cast<size_t>(c.n_mats * c.tokens * c.rows) * 4));
  // expert ids: 16 distinct experts per launch, a new draw per launch
  const int id_sets = 64;
  std::vector<int32_t> hids(id_sets * c.n_mats);
  for (int s = 0; s < id_sets; ++s) {
    std::vector<int32_t> all(c.n_pool);
    for (int64_t e = 0; e < c.n_pool; ++e) all[e] = static_cast<int32_t>(e);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < c.n_mats; ++j) hids[s * c.n_mats + j] = all[j];
  }
  int32_t* ids = nullptr;
  CHECK(cudaMalloc(&ids, hids.size() * 4));
  CHECK(cudaMemcpy(ids, hids.data(), hids.size() * 4, cudaMemcpyHostToDevice));

  k3::cuda::QuantGemvParams p;
  p.type = c.type;
  p.rows = c.rows;
  p.cols = c.cols;
  p.row_bytes = row_bytes;
  p.n_mats = c.n_mats;
  p.mat_stride_bytes = static_cast<int64_t>(mat_stride);
  p.x = x;
  p.x_stride = c.cols;
  p.x_mat_stride = c.shared_x ? 0 : c.tokens * c.cols;
  p.y = y;
  p.y_stride = c.rows;
  p.y_mat_stride = c.tokens * c.rows;
  p.n_tokens = c.tokens;
  p.int8_x = c.int8_x;
  p.iq1s_row_lanes = c.row_lanes;
  p.iq1s_ternary = c.ternary;
  auto launch = [&](int i) {
    p.weight = w[i % copies];
    p.mat_ids = c.n_mats > 1 || c.n_pool > 1 ? ids + (i % id_sets) * c.n_mats : nullptr;
    CHECK(k3::cuda::QuantGemv(p, nullptr));
  };
  for (int i = 0; i < 20; ++i) launch(i);
  CHECK(cudaDeviceSynchronize());

  const int reps = 100;
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  std::vector<float> single(reps);
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(ev[2 * i], nullptr));
    launch(i);
    CHECK(cudaEventRecord(ev[2 * i + 1], nullptr));
    CHECK(cudaEventSynchronize(ev[2 * i + 1]));  // one launch in flight: its own latency
    CHECK(cudaEventElapsedTime(&single[i], ev[2 * i], ev[2 * i + 1]));
  }
  std::sort(single.begin(), single.end());
  const double med_us = 1e3 * single[reps / 2];
  CHECK(cudaEventRecord(ev[0], nullptr));
  for (int i = 0; i < reps; ++i) launch(i);
  CHECK(cudaEventRecord(ev[1], nullptr));
  CHECK(cudaEventSynchronize(ev[1]));
  float total_ms = 0;
  CHECK(cudaEventElapsedTime(&total_ms, ev[0], ev[1]));
  const double stream_us = 1e3 * total_ms / reps;
  for (auto& e : ev) CHECK(cudaEventDestroy(e));

  std::vector<float> hy(static_cast<size_t>(c.n_mats * c.tokens * c.rows));
  CHECK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (float v : hy) bad += !std::isfinite(v);

  const double bytes = static_cast<double>(k3::cuda::QuantGemvMinBytes(p));
  const double gbs_single = bytes / (med_us * 1e3), gbs_stream = bytes / (stream_us * 1e3);
  const double floor_us = bytes / (kFloorTBs * 1e6);
  std::printf("%-34s %-7s %6lld x %-6lld M=%-2lld mats=%-3lld %9.2f MB  single %8.2f us %7.0f GB/s (%4.1f%%)  "
              "stream %8.2f us %7.0f GB/s (%4.1f%%)  floor %7.2f us%s\n",
              c.name, std::string(k3::quant::TypeName(c.type)).c_str(), static_cast<long long>(c.rows),
              static_cast<long long>(c.cols), static_cast<long long>(c.tokens), static_cast<long long>(c.n_mats),
              bytes / 1e6, med_us, gbs_single, 100.0 * gbs_single / (kFloorTBs * 1e3), stream_us, gbs_stream,
              100.0 * gbs_stream / (kFloorTBs * 1e3), floor_us, bad ? "  NON-FINITE OUTPUT" : "");
  if (csv != nullptr) {
    std::fprintf(csv, "%s,%s,%lld,%lld,%lld,%lld,%.0f,%.3f,%.1f,%.3f,%.1f,%.3f,%lld\n", c.name,
                 std::string(k3::quant::TypeName(c.type)).c_str(), static_cast<long long>(c.rows),
                 static_cast<long long>(c.cols), static_cast<long long>(c.tokens), static_cast<long long>(c.n_mats), bytes,
                 med_us, gbs_single, stream_us, gbs_stream, floor_us, static_cast<long long>(bad));
  }
  for (auto* b : w) CHECK(cudaFree(b));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(ids));
}

// ---- direct-load GEMV vs QuantGemv ----------------------------------------------------------------

struct Timing {
  double single_us = 0, stream_us = 0;
};

// Median of 100 individually timed launches and mean of 100 back-to-back ones, after 20 warm-ups.
template <class Launch>
Timing TimeLaunches(Launch&& launch) {
  for (int i = 0; i < 20; ++i) launch(i);
  CHECK(cudaDeviceSynchronize());
  const int reps = 100;
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  std::vector<float> single(reps);
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(ev[2 * i], nullptr));
    launch(i);
    CHECK(cudaEventRecord(ev[2 * i + 1], nullptr));
    CHECK(cudaEventSynchronize(ev[2 * i + 1]));
    CHECK(cudaEventElapsedTime(&single[i], ev[2 * i], ev[2 * i + 1]));
  }
  std::sort(single.begin(), single.end());
  Timing t;
  t.single_us = 1e3 * single[reps / 2];
  CHECK(cudaEventRecord(ev[0], nullptr));
  for (int i = 0; i < reps; ++i) launch(i);
  CHECK(cudaEventRecord(ev[1], nullptr));
  CHECK(cudaEventSynchronize(ev[1]));
  float total_ms = 0;
  CHECK(cudaEventElapsedTime(&total_ms, ev[0], ev[1]));
  t.stream_us = 1e3 * total_ms / reps;
  for (auto& e : ev) CHECK(cudaEventDestroy(e));
  return t;
}

struct DirectCase {
  const char* name;
  GgmlType type;
  int64_t rows, cols;
};

// A shape's buffers: `copies` copies of the same random ggml blocks (rotated through >= 256 MB so
// that each launch reads from HBM, not L2) and, for Q8_0, each repacked for the direct GEMV; a
// random x of kDirectMaxTokens rows and the y they make.
constexpr int64_t kDirectMaxTokens = 4;
struct DirectWeights {
  size_t row_bytes = 0, ggml_bytes = 0, direct_bytes = 0;
  int copies = 0;
  std::vector<uint8_t*> old_w, new_w;
  double repack_us = 0;  // one RepackQ8_0 of the second copy (no first-launch cost)
  bool q8 = false;
  float* x = nullptr;  // [kDirectMaxTokens][cols]
  float* y = nullptr;  // [kDirectMaxTokens][rows]
};

DirectWeights MakeDirectWeights(const DirectCase& c) {
  std::mt19937_64 rng(777);
  DirectWeights d;
  const auto& tr = k3::quant::Traits(c.type);
  d.row_bytes = static_cast<size_t>(c.cols / tr.block_elems) * tr.block_bytes;
  d.ggml_bytes = d.row_bytes * c.rows;
  d.q8 = c.type == GgmlType::kQ8_0;
  d.direct_bytes = d.q8 ? k3::cuda::RepackedQ8_0Bytes(c.rows, c.cols) : d.ggml_bytes;
  d.copies = static_cast<int>(std::ceil(256e6 / static_cast<double>(d.ggml_bytes)));
  d.copies = std::max(2, std::min(d.copies, 64));
  std::vector<uint8_t> host(d.ggml_bytes);
  FillRandom(c.type, host, rng);
  d.old_w.assign(d.copies, nullptr);
  d.new_w.assign(d.copies, nullptr);
  for (int i = 0; i < d.copies; ++i) {
    CHECK(cudaMalloc(&d.old_w[i], d.ggml_bytes));
    CHECK(cudaMemcpy(d.old_w[i], host.data(), d.ggml_bytes, cudaMemcpyHostToDevice));
    if (d.q8) {
      CHECK(cudaMalloc(&d.new_w[i], d.direct_bytes));
      cudaEvent_t e0, e1;
      CHECK(cudaEventCreate(&e0));
      CHECK(cudaEventCreate(&e1));
      CHECK(cudaEventRecord(e0, nullptr));
      CHECK(k3::cuda::RepackQ8_0(d.old_w[i], c.rows, c.cols, d.new_w[i], nullptr));
      CHECK(cudaEventRecord(e1, nullptr));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (i == 1) d.repack_us = 1e3 * ms;
      CHECK(cudaEventDestroy(e0));
      CHECK(cudaEventDestroy(e1));
    } else {
      d.new_w[i] = d.old_w[i];
    }
  }
  std::vector<float> hx(kDirectMaxTokens * c.cols);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : hx) v = nd(rng);
  CHECK(cudaMalloc(&d.x, hx.size() * 4));
  CHECK(cudaMemcpy(d.x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&d.y, static_cast<size_t>(kDirectMaxTokens * c.rows) * 4));
  return d;
}

void FreeDirectWeights(DirectWeights& d) {
  for (int i = 0; i < d.copies; ++i) {
    CHECK(cudaFree(d.old_w[i]));
    if (d.q8) CHECK(cudaFree(d.new_w[i]));
  }
  CHECK(cudaFree(d.x));
  CHECK(cudaFree(d.y));
  d = DirectWeights{};
}

// The direct GEMV's parameters for `tokens` rows of d.x (the weight is set per launch).
k3::cuda::QuantGemvDirectParams DirectParams(const DirectCase& c, const DirectWeights& d, int64_t tokens) {
  k3::cuda::QuantGemvDirectParams np;
  np.type = c.type;
  np.rows = c.rows;
  np.cols = c.cols;
  np.x = d.x;
  np.x_stride = c.cols;
  np.y = d.y;
  np.y_stride = c.rows;
  np.n_tokens = tokens;
  return np;
}

// One shape at M = 1, 2, 4: QuantGemv on ggml blocks vs QuantGemvDirect (Q8_0 repacked on the device
// from the same blocks), each over its own copies of the weights rotated through >= 256 MB.
void RunDirectShape(const DirectCase& c, FILE* csv) {
  DirectWeights d = MakeDirectWeights(c);
  k3::cuda::QuantGemvDirectPlan plan;
  k3::cuda::QuantGemvDirectPlanFor(c.type, c.rows, c.cols, &plan);

  for (int64_t tokens : {1, 2, 4}) {
    k3::cuda::QuantGemvParams op;
    op.type = c.type;
    op.rows = c.rows;
    op.cols = c.cols;
    op.row_bytes = d.row_bytes;
    op.x = d.x;
    op.x_stride = c.cols;
    op.y = d.y;
    op.y_stride = c.rows;
    op.n_tokens = tokens;
    const Timing t_old = TimeLaunches([&](int i) {
      op.weight = d.old_w[i % d.copies];
      CHECK(k3::cuda::QuantGemv(op, nullptr));
    });
    k3::cuda::QuantGemvDirectParams np = DirectParams(c, d, tokens);
    const Timing t_new = TimeLaunches([&](int i) {
      np.weight = d.new_w[i % d.copies];
      CHECK(k3::cuda::QuantGemvDirect(np, nullptr));
    });
    std::vector<float> hy(static_cast<size_t>(tokens * c.rows));
    CHECK(cudaMemcpy(hy.data(), d.y, hy.size() * 4, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (float v : hy) bad += !std::isfinite(v);
    const double bytes = static_cast<double>(k3::cuda::QuantGemvDirectMinBytes(np));
    const double floor_us = bytes / (kFloorTBs * 1e6);
    auto gbs = [&](double us) { return bytes / (us * 1e3); };
    auto pct = [&](double us) { return 100.0 * gbs(us) / (kFloorTBs * 1e3); };
    std::printf("direct %-28s %-4s %6lld x %-6lld M=%lld %8.2f MB floor %7.2f us | old stream %8.2f us %5.1f%% | "
                "new stream %8.2f us %6.0f GB/s %5.1f%% single %8.2f us | x%.2f  [R=%d S=%d blocks=%lld]%s\n",
                c.name, std::string(k3::quant::TypeName(c.type)).c_str(), static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), static_cast<long long>(tokens), bytes / 1e6, floor_us, t_old.stream_us,
                pct(t_old.stream_us), t_new.stream_us, gbs(t_new.stream_us), pct(t_new.stream_us), t_new.single_us,
                t_old.stream_us / t_new.stream_us, plan.rows_per_warp, plan.slices,
                static_cast<long long>(plan.blocks), bad ? "  NON-FINITE OUTPUT" : "");
    std::fflush(stdout);
    if (csv != nullptr) {
      std::fprintf(csv, "%s,%s,%lld,%lld,%lld,%.0f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.3f,%d,%d,%lld,%lld\n", c.name,
                   std::string(k3::quant::TypeName(c.type)).c_str(), static_cast<long long>(c.rows),
                   static_cast<long long>(c.cols), static_cast<long long>(tokens), bytes, floor_us, t_old.single_us,
                   t_old.stream_us, t_new.single_us, t_new.stream_us, gbs(t_new.stream_us), pct(t_new.stream_us),
                   d.repack_us, plan.rows_per_warp, plan.slices, static_cast<long long>(plan.blocks),
                   static_cast<long long>(bad));
    }
  }
  if (d.q8) std::printf("direct %-28s repack (one-time) %.1f us\n", c.name, d.repack_us);
  FreeDirectWeights(d);
}

// The direct GEMV's cut searched (--direct-sweep): for M = 1 and 4, every slice count and 1, 2, 4
// or 8 row groups per block, back-to-back launches over the rotated copies. Prints the plan's
// time, the best cut's, and a row per slice count (us per groups-per-block choice).
void SweepDirectShape(const DirectCase& c, FILE* csv) {
  DirectWeights d = MakeDirectWeights(c);
  k3::cuda::QuantGemvDirectPlan plan;
  CHECK(k3::cuda::QuantGemvDirectPlanFor(c.type, c.rows, c.cols, &plan) ? cudaSuccess : cudaErrorInvalidValue);
  const int max_slices = std::min(plan.steps, 16);
  const int gpbs[] = {1, 2, 4, 8};
  for (int64_t tokens : {1, 4}) {
    k3::cuda::QuantGemvDirectParams np = DirectParams(c, d, tokens);
    auto time_cut = [&](int slices, int gpb) {
      np.plan_slices = slices;
      np.plan_groups_per_block = gpb;
      return TimeLaunches([&](int i) {
               np.weight = d.new_w[i % d.copies];
               CHECK(k3::cuda::QuantGemvDirect(np, nullptr));
             }).stream_us;
    };
    const double plan_us = time_cut(0, 0);
    double best_us = plan_us;
    int best_s = plan.slices, best_g = plan.groups_per_block;
    std::string grid;
    for (int sl = 1; sl <= max_slices; ++sl) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "\n    S=%-2d", sl);
      grid += buf;
      for (int gpb : gpbs) {
        k3::cuda::QuantGemvDirectPlan forced;
        if (!k3::cuda::QuantGemvDirectPlanWith(c.type, c.rows, c.cols, sl, gpb, &forced)) continue;
        const double us = time_cut(sl, gpb);
        std::snprintf(buf, sizeof buf, "  g%d %7.2f", gpb, us);
        grid += buf;
        if (csv != nullptr) {
          std::fprintf(csv, "%s,%s,%lld,%lld,%lld,%d,%d,%lld,%.3f,%.3f\n", c.name,
                       std::string(k3::quant::TypeName(c.type)).c_str(), static_cast<long long>(c.rows),
                       static_cast<long long>(c.cols), static_cast<long long>(tokens), sl, gpb,
                       static_cast<long long>(forced.blocks), us, plan_us);
        }
        if (us < best_us) best_us = us, best_s = sl, best_g = gpb;
      }
    }
    const double bytes = static_cast<double>(k3::cuda::QuantGemvDirectMinBytes(np));
    std::printf("sweep %-28s %-4s %6lld x %-6lld M=%lld floor %7.2f us | plan S=%d g=%d R=%d %7.2f us | best S=%d g=%d "
                "%7.2f us (x%.3f)%s\n",
                c.name, std::string(k3::quant::TypeName(c.type)).c_str(), static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), static_cast<long long>(tokens), bytes / (kFloorTBs * 1e6),
                plan.slices, plan.groups_per_block, plan.rows_per_warp, plan_us, best_s, best_g, best_us,
                plan_us / best_us, grid.c_str());
    std::fflush(stdout);
  }
  FreeDirectWeights(d);
}

void RunDirectCases(FILE* csv, bool sweep) {
  if (csv && sweep) {
    std::fprintf(csv, "case,type,rows,cols,tokens,slices,groups_per_block,blocks,stream_us,plan_stream_us\n");
  } else if (csv) {
    std::fprintf(csv, "case,type,rows,cols,tokens,bytes,floor_us,old_single_us,old_stream_us,new_single_us,"
                      "new_stream_us,new_stream_gbs,new_pct_of_floor,repack_us,rows_per_warp,slices,blocks,nonfinite\n");
  }
  const DirectCase cases[] = {
      {"kda_qkvg 7168->12288", GgmlType::kQ8_0, 12288, 7168},
      {"attn_output 12288->7168", GgmlType::kQ8_0, 7168, 12288},
      {"7168->3584", GgmlType::kQ8_0, 3584, 7168},
      {"3584->7168", GgmlType::kQ8_0, 7168, 3584},
      {"shexp_gate_up 7168->6144", GgmlType::kQ8_0, 6144, 7168},
      {"shexp_down 6144->7168", GgmlType::kQ8_0, 7168, 6144},
      {"dense_ffn_up 7168->33792", GgmlType::kQ8_0, 33792, 7168},
      {"dense_ffn_down 33792->7168", GgmlType::kQ8_0, 7168, 33792},
      {"lm_head 7168->163840", GgmlType::kQ8_0, 163840, 7168},
      {"7168->96", GgmlType::kQ8_0, 96, 7168},
      {"7168->128", GgmlType::kQ8_0, 128, 7168},
      {"128->12288", GgmlType::kQ8_0, 12288, 128},
      {"q_a 7168->1536", GgmlType::kQ8_0, 1536, 7168},
      {"q_b 1536->12288", GgmlType::kQ8_0, 12288, 1536},
      {"kv_a 7168->576", GgmlType::kQ8_0, 576, 7168},
      {"router 7168->896", GgmlType::kF32, 896, 7168},
      {"generic 7168->12288", GgmlType::kBF16, 12288, 7168},
      {"generic 7168->12288", GgmlType::kF16, 12288, 7168},
  };
  for (const DirectCase& c : cases) {
    if (!sweep) {
      RunDirectShape(c, csv);
    } else if (c.type == GgmlType::kQ8_0 || c.type == GgmlType::kF32) {
      SweepDirectShape(c, csv);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  bool direct = false, direct_only = false, sweep = false;
  const char* csv_path = nullptr;
  const char* direct_csv_path = nullptr;
  std::string only;  // --only=SUBSTR: the generic cases whose name contains SUBSTR
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--direct-only") {
      direct = direct_only = true;
    } else if (a == "--direct-sweep") {
      direct = direct_only = sweep = true;
    } else if (a == "--direct") {
      direct = true;
    } else if (a.rfind("--only=", 0) == 0) {
      only = a.substr(7);
    } else if (a.rfind("--direct-csv=", 0) == 0) {
      direct_csv_path = argv[i] + 13;
    } else {
      csv_path = argv[i];
    }
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; floor %.1f TB/s\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, kFloorTBs);
  if (!direct_only) {
    FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
    if (csv) std::fprintf(csv, "case,type,rows,cols,tokens,mats,bytes,single_us,single_gbs,stream_us,stream_gbs,floor_us,nonfinite\n");
    const Case cases[] = {
        {"kda_qkvg_proj 7168->12288", GgmlType::kQ8_0, 12288, 7168, 1, 1, 1, true},
        {"kda_qkvg_proj 7168->12288", GgmlType::kQ8_0, 12288, 7168, 2, 1, 1, true},
        {"kda_qkvg_proj 7168->12288", GgmlType::kQ8_0, 12288, 7168, 4, 1, 1, true},
        {"kda_qkvg_proj 7168->12288", GgmlType::kQ8_0, 12288, 7168, 8, 1, 1, true},
        {"kda_qkvg_proj 7168->12288", GgmlType::kQ8_0, 12288, 7168, 16, 1, 1, true},
        {"attn_output 12288->7168", GgmlType::kQ8_0, 7168, 12288, 1, 1, 1, true},
        {"shexp_gate 7168->6144", GgmlType::kQ8_0, 6144, 7168, 1, 1, 1, true},
        {"routed_down 7168->3584", GgmlType::kQ8_0, 3584, 7168, 1, 1, 1, true},
        {"router 7168->896", GgmlType::kF32, 896, 7168, 1, 1, 1, true},
        {"expert gate 3584->3072 x1", GgmlType::kIQ1_S, 3072, 3584, 1, 1, 896, true},
        {"expert gate 3584->3072 x16", GgmlType::kIQ1_S, 3072, 3584, 1, 16, 896, true},
        {"expert down 3072->3584 x16", GgmlType::kIQ1_S, 3584, 3072, 1, 16, 896, false},
        {"expert gate x16, 4 tok", GgmlType::kIQ1_S, 3072, 3584, 4, 16, 896, false},
        {"expert gate x16, 8 tok", GgmlType::kIQ1_S, 3072, 3584, 8, 16, 896, false},
        {"expert gate x256 (batch 16)", GgmlType::kIQ1_S, 3072, 3584, 1, 256, 896, false},
        {"expert int8x gate 3584->3072 x16", GgmlType::kIQ1_S, 3072, 3584, 1, 16, 896, true, true},
        {"expert int8x down 3072->3584 x16", GgmlType::kIQ1_S, 3584, 3072, 1, 16, 896, false, true},
        {"expert int8x-sub gate 3584->3072 x16", GgmlType::kIQ1_S, 3072, 3584, 1, 16, 896, true, true, false},
        {"expert int8x-sub down 3072->3584 x16", GgmlType::kIQ1_S, 3584, 3072, 1, 16, 896, false, true, false},
        {"expert int8x gate x16, 4 tok", GgmlType::kIQ1_S, 3072, 3584, 4, 16, 896, false, true},
        {"expert int8x gate x256 (batch 16)", GgmlType::kIQ1_S, 3072, 3584, 1, 256, 896, false, true},
        {"expert int8x-tern gate 3584->3072 x16", GgmlType::kIQ1_S, 3072, 3584, 1, 16, 896, true, true, true, true},
        {"expert int8x-tern down 3072->3584 x16", GgmlType::kIQ1_S, 3584, 3072, 1, 16, 896, false, true, true, true},
        {"expert int8x-tern gate x256 (batch 16)", GgmlType::kIQ1_S, 3072, 3584, 1, 256, 896, false, true, true, true},
        {"generic 7168->12288", GgmlType::kIQ2_XS, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kIQ2_XXS, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kQ2_K, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kQ3_K, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kQ4_K, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kQ5_K, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kQ6_K, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kBF16, 12288, 7168, 1, 1, 1, true},
        {"generic 7168->12288", GgmlType::kF16, 12288, 7168, 1, 1, 1, true},
    };
    for (const Case& c : cases) {
      if (only.empty() || std::string(c.name).find(only) != std::string::npos) RunCase(c, csv);
    }
    if (csv) std::fclose(csv);
  }
  if (direct) {
    FILE* dcsv = direct_csv_path ? std::fopen(direct_csv_path, "w") : nullptr;
    RunDirectCases(dcsv, sweep);
    if (dcsv) std::fclose(dcsv);
  }
  return 0;
}
