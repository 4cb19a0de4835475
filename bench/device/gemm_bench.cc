// Times the tensor-core prefill products (k3::cuda::QuantGemm) at the K3 shapes with CUDA events
// and prints TFLOP/s against the tensor-core rate (H200 dense f16/bf16 ≈ 790 TFLOP/s measured
// through cuBLAS; with cuBLAS linked the bench measures it again, 8192³ f16, and also times
// cuBLAS on each dense shape with f16 copies of the weights, the "no dequantization" reference).
//   k3_cuda_gemm_bench [out.csv|-] [dense|experts|variants|profile|all] [T]   (defaults: no csv, all, every T)
// Cases, each at T = 512, 2048, 4096, 8192 tokens: Q8_0 7168 -> 12288 and 12288 -> 7168, the F32
// router 7168 -> 896, IQ1_S experts 3584 -> 3072 (gate/up, x gathered through x_rows) and
// 3072 -> 3584 (down, grouped x) over 896 experts with T·16 grouped rows routed with uneven
// (log-normal) popularity, and again with uniform popularity (rows per expert ~T·16/896 ± its
// square root, as a balanced router gives); MoeGroupTokens and MoeCombineGrouped at the same T.
// `variants` times the expert products under every QuantGemmParams knob instead (the mma.sync
// kernel with the IQ1_S decode generic or f16 × token tile 64 or 128, the same results bit for bit;
// its automatic tile; the wgmma kernel, the default on the H200); `profile` makes
// one launch of each (uniform routing, T = 4096 unless given) for a profiler. Random data,
// never zeros; 2 warm-up launches, then the mean of back-to-back launches (>= 3, about 100 ms).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef K3_BENCH_CUBLAS
#include <cublas_v2.h>
#endif

#include "kernels/cuda/quant_gemm/quant_gemm.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"

namespace {

using k3::quant::GgmlType;

double g_peak_tflops = 790.0;  // replaced by the cuBLAS measurement when available

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Mean milliseconds of one call: 2 warm-ups, then back-to-back calls for ~100 ms (>= 3).
double TimeMs(const std::function<void()>& call) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  call();
  call();
  CHECK(cudaEventRecord(a, nullptr));
  call();
  CHECK(cudaEventRecord(b, nullptr));
  CHECK(cudaEventSynchronize(b));
  float one = 0;
  CHECK(cudaEventElapsedTime(&one, a, b));
  const int reps = std::max(3, std::min(200, static_cast<int>(100.0 / std::max(one, 1e-3f))));
  CHECK(cudaEventRecord(a, nullptr));
  for (int i = 0; i < reps; ++i) call();
  CHECK(cudaEventRecord(b, nullptr));
  CHECK(cudaEventSynchronize(b));
  float total = 0;
  CHECK(cudaEventElapsedTime(&total, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return total / reps;
}

// Random quant bytes with sane f16 scales (decoded weights finite, O(0.01..1)).
void FillWeights(GgmlType type, std::vector<uint8_t>& buf, std::mt19937_64& rng) {
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(buf.data() + i, &r, 8);
  }
  if (type == GgmlType::kF32) {
    std::normal_distribution<float> n(0.f, 0.05f);
    for (size_t i = 0; i + 4 <= buf.size(); i += 4) {
      float v = n(rng);
      if (v == 0.0f) v = 1e-3f;
      std::memcpy(buf.data() + i, &v, 4);
    }
    return;
  }
  const auto& tr = k3::quant::Traits(type);
  for (size_t b = 0; (b + 1) * tr.block_bytes <= buf.size(); ++b) {
    const uint16_t d = k3::quant::F32ToF16(0.002f + 0.018f * static_cast<float>(rng() % 1000) / 1000.0f);
    std::memcpy(buf.data() + b * tr.block_bytes, &d, 2);  // Q8_0 and IQ1_S: d first
  }
}

std::vector<float> RandomX(size_t n, std::mt19937_64& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : x) {
    v = nd(rng);
    if (v == 0.0f) v = 0.5f;
  }
  return x;
}

struct Csv {
  FILE* f = nullptr;
  void Row(const std::string& name, const char* type, int64_t rows, int64_t cols, int64_t tokens, int64_t grouped_rows,
           bool split, double ms, double tflops, double cublas_ms) {
    std::printf("%-28s %-6s %6lld x %-6lld T=%-5lld rows=%-7lld %-5s %9.3f ms %7.1f TFLOP/s (%5.1f%% of %.0f)",
                name.c_str(), type, static_cast<long long>(rows), static_cast<long long>(cols),
                static_cast<long long>(tokens), static_cast<long long>(grouped_rows), split ? "split" : "", ms, tflops,
                100.0 * tflops / g_peak_tflops, g_peak_tflops);
    if (cublas_ms > 0) {
      const double ct = 2.0 * rows * cols * grouped_rows / (cublas_ms * 1e9);
      std::printf("  | cuBLAS f16 same shape %8.3f ms %6.1f TFLOP/s", cublas_ms, ct);
    }
    std::printf("\n");
    std::fflush(stdout);
    if (f) {
      std::fprintf(f, "%s,%s,%lld,%lld,%lld,%lld,%d,%.4f,%.2f,%.4f\n", name.c_str(), type, static_cast<long long>(rows),
                   static_cast<long long>(cols), static_cast<long long>(tokens), static_cast<long long>(grouped_rows),
                   split ? 1 : 0, ms, tflops, cublas_ms);
    }
  }
};

#ifdef K3_BENCH_CUBLAS
cublasHandle_t g_cublas = nullptr;

// C[T][rows] (f32) = x[T][cols] (f16) · W[rows][cols]^T (f16), f32 accumulation.
double CublasMs(const __half* w, const __half* x, float* y, int64_t rows, int64_t cols, int64_t tokens) {
  const float alpha = 1.0f, beta = 0.0f;
  return TimeMs([&] {
    const cublasStatus_t s = cublasGemmEx(g_cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                          static_cast<int>(tokens), static_cast<int>(cols), &alpha, w, CUDA_R_16F,
                                          static_cast<int>(cols), x, CUDA_R_16F, static_cast<int>(cols), &beta, y,
                                          CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmEx failed: %d\n", static_cast<int>(s));
      std::exit(1);
    }
  });
}

void MeasurePeak() {
  const int n = 8192;
  __half *a, *b, *c;
  CHECK(cudaMalloc(&a, size_t{2} * n * n));
  CHECK(cudaMalloc(&b, size_t{2} * n * n));
  CHECK(cudaMalloc(&c, size_t{2} * n * n));
  std::mt19937_64 rng(3);
  std::vector<__half> h(size_t{n} * n);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : h) v = __float2half(u(rng));
  CHECK(cudaMemcpy(a, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = TimeMs([&] {
    cublasGemmEx(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16F, n, b, CUDA_R_16F, n, &beta, c,
                 CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  g_peak_tflops = 2.0 * n * n * double(n) / (ms * 1e9);
  std::printf("cuBLAS f16 8192^3 (f32 accumulate): %.3f ms, %.1f TFLOP/s: the reference rate below\n", ms, g_peak_tflops);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
}
#endif

std::vector<int64_t> kTokens = {512, 2048, 4096, 8192};

// Plain (dense) products.
void DenseCase(const char* name, GgmlType type, int64_t rows, int64_t cols, bool with_split, Csv& csv) {
  std::mt19937_64 rng(11);
  const auto& tr = k3::quant::Traits(type);
  const size_t row_bytes = static_cast<size_t>(cols / tr.block_elems) * tr.block_bytes;
  std::vector<uint8_t> hw(row_bytes * rows);
  FillWeights(type, hw, rng);
  uint8_t* w;
  CHECK(cudaMalloc(&w, hw.size()));
  CHECK(cudaMemcpy(w, hw.data(), hw.size(), cudaMemcpyHostToDevice));
  const int64_t tmax = kTokens.back();
  const std::vector<float> hx = RandomX(static_cast<size_t>(tmax * cols), rng);
  float *x, *y;
  CHECK(cudaMalloc(&x, hx.size() * 4));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&y, static_cast<size_t>(tmax * rows) * 4));
#ifdef K3_BENCH_CUBLAS
  // f16 copies (values irrelevant to timing, but random and non-zero)
  __half *w16, *x16;
  CHECK(cudaMalloc(&w16, static_cast<size_t>(rows * cols) * 2));
  CHECK(cudaMalloc(&x16, static_cast<size_t>(tmax * cols) * 2));
  {
    std::vector<__half> h(static_cast<size_t>(std::max(rows, tmax) * cols));
    for (size_t i = 0; i < h.size(); ++i) h[i] = __float2half(hx[i % hx.size()] * 0.05f + 1e-3f);
    CHECK(cudaMemcpy(w16, h.data(), static_cast<size_t>(rows * cols) * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(x16, h.data(), static_cast<size_t>(tmax * cols) * 2, cudaMemcpyHostToDevice));
  }
#endif
  k3::cuda::QuantGemmParams p;
  p.type = type;
  p.weight = w;
  p.rows = rows;
  p.cols = cols;
  p.row_bytes = row_bytes;
  p.x = x;
  p.x_stride = cols;
  p.y = y;
  p.y_stride = rows;
  p.n_tokens = tmax;
  p.split_x = with_split;
  const size_t ws_bytes = k3::cuda::QuantGemmWorkspaceBytes(p);  // the largest T (and split) needs the most
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;
  for (int64_t T : kTokens) {
    for (int split = 0; split <= (with_split ? 1 : 0); ++split) {
      p.n_tokens = T;
      p.split_x = split != 0;
      const double ms = TimeMs([&] { CHECK(k3::cuda::QuantGemm(p, nullptr)); });
      double cublas_ms = 0;
#ifdef K3_BENCH_CUBLAS
      if (!split) cublas_ms = CublasMs(w16, x16, y, rows, cols, T);
#endif
      csv.Row(name, std::string(k3::quant::TypeName(type)).c_str(), rows, cols, T, T, split, ms,
              k3::cuda::QuantGemmFlops(p, T) / (ms * 1e9), cublas_ms);
    }
  }
  std::vector<float> hy(static_cast<size_t>(tmax * rows));
  CHECK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (float v : hy) bad += !std::isfinite(v);
  if (bad) std::printf("  NON-FINITE OUTPUTS: %lld\n", static_cast<long long>(bad));
#ifdef K3_BENCH_CUBLAS
  CHECK(cudaFree(w16));
  CHECK(cudaFree(x16));
#endif
  CHECK(cudaFree(ws));
  CHECK(cudaFree(w));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
}

// Router-like ids: per token the top-k of log(popularity) + Gumbel noise (k distinct experts),
// popularity log-normal (sigma 1: very uneven groups, as in practice) or, with sigma 0, uniform.
std::vector<int32_t> RouteIds(int64_t T, int64_t k, int64_t E, std::mt19937_64& rng, double sigma = 1.0) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> logp(E);
  for (auto& v : logp) v = sigma * nd(rng);
  std::uniform_real_distribution<double> ud(1e-12, 1.0);
  std::vector<int32_t> ids(T * k);
  std::vector<std::pair<double, int32_t>> s(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) s[e] = {logp[e] - std::log(-std::log(ud(rng))), static_cast<int32_t>(e)};
    std::partial_sort(s.begin(), s.begin() + k, s.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int64_t j = 0; j < k; ++j) ids[t * k + j] = s[j].second;
  }
  return ids;
}

// variants: every knob setting; profile: the same, one launch each, uniform routing only.
void ExpertCases(Csv& csv, bool variants, bool profile) {
  // One launch when profiling (the time printed is then meaningless), else TimeMs.
  auto time_ms = [&](const std::function<void()>& call) {
    if (!profile) return TimeMs(call);
    call();
    CHECK(cudaDeviceSynchronize());
    return 1.0;
  };
  const int64_t E = 896, K = 16, latent = 3584, ffn = 3072;
  const GgmlType type = GgmlType::kIQ1_S;
  const size_t gate_row = static_cast<size_t>(latent / 256) * 50, down_row = static_cast<size_t>(ffn / 256) * 50;
  const size_t mat_bytes = gate_row * ffn;  // == down_row * latent: one pool serves both shapes
  std::mt19937_64 rng(21);
  std::vector<uint8_t> hw(mat_bytes * E);
  FillWeights(type, hw, rng);
  uint8_t* w;
  CHECK(cudaMalloc(&w, hw.size()));
  CHECK(cudaMemcpy(w, hw.data(), hw.size(), cudaMemcpyHostToDevice));
  hw.clear();
  hw.shrink_to_fit();
  const int64_t tmax = kTokens.back(), gmax = tmax * K;
  const std::vector<float> hx = RandomX(static_cast<size_t>(tmax * latent), rng);
  float *x, *xd, *y, *wts, *out;
  CHECK(cudaMalloc(&x, hx.size() * 4));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&xd, static_cast<size_t>(gmax * ffn) * 4));
  {
    std::vector<float> h = RandomX(static_cast<size_t>(gmax * ffn) / 64, rng);  // tiled: any non-zero data
    for (int64_t i = 0; i < 64; ++i) CHECK(cudaMemcpy(xd + i * h.size(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMalloc(&y, static_cast<size_t>(gmax * latent) * 4));
  CHECK(cudaMalloc(&out, static_cast<size_t>(tmax * latent) * 4));
  CHECK(cudaMalloc(&wts, static_cast<size_t>(gmax) * 4));
  {
    std::vector<float> h(gmax, 1.0f / K);
    CHECK(cudaMemcpy(wts, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  int32_t *ids, *off, *xrows, *slot;
  void* ws;
  CHECK(cudaMalloc(&ids, static_cast<size_t>(gmax) * 4));
  CHECK(cudaMalloc(&off, static_cast<size_t>(E + 1) * 4));
  CHECK(cudaMalloc(&xrows, static_cast<size_t>(gmax) * 4));
  CHECK(cudaMalloc(&slot, static_cast<size_t>(gmax) * 4));
  CHECK(cudaMalloc(&ws, k3::cuda::MoeGroupWorkspaceBytes(tmax, K, E)));
  // GEMM workspace: the down product's f16 copy of the grouped x (gmax x 3072), split for gate
  const size_t gemm_ws_bytes = static_cast<size_t>(gmax) * latent * 2 * 2 + 1024;
  void* gemm_ws;
  CHECK(cudaMalloc(&gemm_ws, gemm_ws_bytes));

  // Knob settings timed per routing: the defaults, or (variants) every decode × token tile.
  struct Knob {
    const char* tag;
    bool generic;
    int32_t tile;
    bool wgmma;
  };
  const std::vector<Knob> knobs =
      variants ? std::vector<Knob>{{" [generic t64]", true, 64, false},   {" [generic t128]", true, 128, false},
                                   {" [f16 t64]", false, 64, false},      {" [f16 t128]", false, 128, false},
                                   {" [mma.sync auto]", false, 0, false}, {" [wgmma]", false, 0, true}}
               : std::vector<Knob>{{"", false, 0, true}};
  for (int64_t T : kTokens) {
    const std::vector<int32_t> hids = RouteIds(T, K, E, rng);
    std::mt19937_64 urng(31 + T);  // its own generator: the log-normal routing stays as before
    const std::vector<int32_t> uids = RouteIds(T, K, E, urng, 0.0);
    for (int routing = profile ? 1 : 0; routing < 2; ++routing) {
      const std::vector<int32_t>& rids = routing == 0 ? hids : uids;
      const char* const rname = routing == 0 ? "" : " uniform";
      CHECK(cudaMemcpy(ids, rids.data(), rids.size() * 4, cudaMemcpyHostToDevice));
      std::vector<int64_t> cnt(E, 0);
      for (int32_t e : rids) ++cnt[e];
      std::sort(cnt.begin(), cnt.end());
      int64_t empty = 0;
      for (int64_t c : cnt) empty += c == 0;
      std::printf("routing%s T=%lld: %lld grouped rows; rows per expert min %lld median %lld max %lld, %lld experts empty\n",
                  rname, static_cast<long long>(T), static_cast<long long>(T * K), static_cast<long long>(cnt.front()),
                  static_cast<long long>(cnt[E / 2]), static_cast<long long>(cnt.back()), static_cast<long long>(empty));

      k3::cuda::MoeGroupParams gp;
      gp.ids = ids;
      gp.n_tokens = T;
      gp.k = K;
      gp.n_experts = E;
      gp.group_offsets = off;
      gp.x_rows = xrows;
      gp.slot_of = slot;
      gp.workspace = ws;
      const double group_ms = time_ms([&] { CHECK(k3::cuda::MoeGroupTokens(gp, nullptr)); });

      for (const Knob& kn : knobs) {
        k3::cuda::QuantGemmParams p;
        p.type = type;
        p.weight = w;
        p.mat_stride_bytes = static_cast<int64_t>(mat_bytes);
        p.n_tokens = T * K;
        p.n_groups = E;
        p.group_offsets = off;
        p.y = y;
        p.workspace = gemm_ws;
        p.workspace_bytes = gemm_ws_bytes;
        p.generic_decode = kn.generic;
        p.token_tile = kn.tile;
        p.wgmma = kn.wgmma;
        // gate/up: 3584 -> 3072, x gathered from the token rows
        p.rows = ffn;
        p.cols = latent;
        p.row_bytes = gate_row;
        p.x = x;
        p.x_stride = latent;
        p.x_rows = xrows;
        p.x_src_rows = T;
        p.y_stride = ffn;
        for (int split = 0; split <= (variants || routing != 0 ? 0 : 1); ++split) {
          p.split_x = split != 0;
          const double ms = time_ms([&] { CHECK(k3::cuda::QuantGemm(p, nullptr)); });
          csv.Row(std::string("expert gate 3584->3072 x896") + rname + kn.tag, "IQ1_S", ffn, latent, T, T * K, split,
                  ms, k3::cuda::QuantGemmFlops(p, T * K) / (ms * 1e9), 0);
        }
        // down: 3072 -> 3584, x = the grouped intermediate itself
        p.rows = latent;
        p.cols = ffn;
        p.row_bytes = down_row;
        p.x = xd;
        p.x_stride = ffn;
        p.x_rows = nullptr;
        p.y_stride = latent;
        p.split_x = false;
        const double ms = time_ms([&] { CHECK(k3::cuda::QuantGemm(p, nullptr)); });
        csv.Row(std::string("expert down 3072->3584 x896") + rname + kn.tag, "IQ1_S", latent, ffn, T, T * K, false, ms,
                k3::cuda::QuantGemmFlops(p, T * K) / (ms * 1e9), 0);
      }
      if (routing != 0 || variants) continue;

      k3::cuda::MoeCombineParams cp;
      cp.y = y;
      cp.y_stride = latent;
      cp.slot_of = slot;
      cp.weights = wts;
      cp.n_tokens = T;
      cp.k = K;
      cp.cols = latent;
      cp.out = out;
      cp.out_stride = latent;
      const double combine_ms = TimeMs([&] { CHECK(k3::cuda::MoeCombineGrouped(cp, nullptr)); });
      const double combine_gbs =
          (static_cast<double>(T * K) * latent * 4 + static_cast<double>(T) * latent * 4) / (combine_ms * 1e6);
      std::printf("%-28s T=%-5lld MoeGroupTokens %.1f us | MoeCombineGrouped %.1f us (%.0f GB/s)\n", "moe grouping",
                  static_cast<long long>(T), 1e3 * group_ms, 1e3 * combine_ms, combine_gbs);
      if (csv.f) {
        std::fprintf(csv.f, "moe_group_tokens,,0,0,%lld,%lld,0,%.4f,0,0\n", static_cast<long long>(T),
                     static_cast<long long>(T * K), group_ms);
        std::fprintf(csv.f, "moe_combine,,0,%lld,%lld,%lld,0,%.4f,0,0\n", static_cast<long long>(latent),
                     static_cast<long long>(T), static_cast<long long>(T * K), combine_ms);
      }
    }
  }
  for (void* q : {static_cast<void*>(w), static_cast<void*>(x), static_cast<void*>(xd), static_cast<void*>(y),
                  static_cast<void*>(out), static_cast<void*>(wts), static_cast<void*>(ids), static_cast<void*>(off),
                  static_cast<void*>(xrows), static_cast<void*>(slot), ws, gemm_ws}) {
    CHECK(cudaFree(q));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
#ifdef K3_BENCH_CUBLAS
  if (cublasCreate(&g_cublas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  MeasurePeak();
#else
  std::printf("reference rate: %.0f TFLOP/s (H200 dense f16/bf16 through cuBLAS, measured earlier)\n", g_peak_tflops);
#endif
  Csv csv;
  csv.f = argc > 1 && std::string(argv[1]) != "-" ? std::fopen(argv[1], "w") : nullptr;
  const std::string which = argc > 2 ? argv[2] : "all";
  if (argc > 3) kTokens = {std::atoll(argv[3])};
  if (csv.f) std::fprintf(csv.f, "case,type,rows,cols,tokens,grouped_rows,split,ms,tflops,cublas_f16_ms\n");
  if (which == "all" || which == "dense") {
    DenseCase("kda_qkvg_proj 7168->12288", GgmlType::kQ8_0, 12288, 7168, true, csv);
    DenseCase("attn_output 12288->7168", GgmlType::kQ8_0, 7168, 12288, false, csv);
    DenseCase("router 7168->896", GgmlType::kF32, 896, 7168, false, csv);
  }
  if (which == "all" || which == "experts") ExpertCases(csv, false, false);
  if (which == "variants") ExpertCases(csv, true, false);
  if (which == "profile") {
    if (argc <= 3) kTokens = {4096};
    ExpertCases(csv, true, true);
  }
  if (csv.f) std::fclose(csv.f);
#ifdef K3_BENCH_CUBLAS
  cublasDestroy(g_cublas);
#endif
  return 0;
}
