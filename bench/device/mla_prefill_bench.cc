// Times MLA prefill attention (spec 4.5, absorbed form) with CUDA events: the tensor-core kernel
// k3::cuda::MlaPrefill against the old path (k3::cuda::MlaDecode with one "sequence" per query
// row, block_table_stride 0, seq_lens per row, splits as the engine picks them).
//   k3_cuda_mla_prefill_bench [--no-old]
// Cases: runs of 2048 rows at positions 0, 2048, 6144 (lens up to 8192), 96 heads, f32 cache
// (old and new, outputs compared: worst relative L2 per (row, head)), then the new kernel alone on
// an f16 cache, on 48 heads, and on runs of 512 rows at contexts up to 32k. Paged cache (64 rows
// per page, shuffled), random data. FLOPs = 2 · heads · Σ_i len_i · (576 + 512). 2 warm-up
// calls, then the median of individually timed calls (7 new, 3 old).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/mla/mla_prefill.h"
#include "kernels/quant/half.h"

namespace {

using k3::cuda::MlaCacheType;

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

constexpr int64_t kRow = 576, kValue = 512, kPage = 64, kMaxRows = 2048, kMaxLen = 32768;

// Median milliseconds of `reps` individually timed calls after 2 warm-ups.
double MedianMs(const std::function<void()>& call, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  call();
  call();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(a, nullptr));
    call();
    CHECK(cudaEventRecord(b, nullptr));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// Fast random fill: uniform in [-sqrt(3), sqrt(3)] (unit variance), never all zeros.
void FillUniform(std::vector<float>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (static_cast<float>(s >> 40) / 16777216.0f * 2.0f - 1.0f) * 1.7320508f;
  }
}

int64_t Bucket(int64_t max_len) {
  int64_t b = 256;
  while (b < max_len) b *= 2;
  return b;
}

struct Device {
  float* q = nullptr;          // [kMaxRows][96·576]
  float* cache32 = nullptr;    // pool of pages, f32
  uint16_t* cache16 = nullptr; // the same values as f16
  int32_t* table = nullptr;
  int32_t* lens = nullptr;
  float* out_new = nullptr;
  float* out_old = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  int64_t page_stride = kPage * kRow;
};

struct Result {
  double ms, tflops;
};

double Flops(int64_t heads, int64_t rows, int64_t pos) {
  const double sum_len = static_cast<double>(rows) * static_cast<double>(pos) + 0.5 * rows * (rows + 1.0);
  return 2.0 * heads * sum_len * (kRow + kValue);
}

void EnsureWorkspace(Device& d, size_t bytes) {
  if (bytes <= d.ws_bytes) return;
  if (d.ws != nullptr) CHECK(cudaFree(d.ws));
  CHECK(cudaMalloc(&d.ws, bytes));
  d.ws_bytes = bytes;
}

void SetLens(Device& d, int64_t rows, int64_t pos) {
  std::vector<int32_t> lens(rows);
  for (int64_t i = 0; i < rows; ++i) lens[i] = static_cast<int32_t>(pos + i + 1);
  CHECK(cudaMemcpy(d.lens, lens.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice));
}

Result RunNew(Device& d, int64_t heads, int64_t rows, int64_t pos, MlaCacheType type, int* splits_out) {
  SetLens(d, rows, pos);
  const int64_t bucket = Bucket(pos + rows);
  k3::cuda::MlaPrefillParams p;
  p.q = d.q;
  p.q_row_stride = heads * kRow;
  p.cache = type == MlaCacheType::kF16 ? static_cast<const void*>(d.cache16) : d.cache32;
  p.cache_type = type;
  p.page_stride = d.page_stride;
  p.row_stride = kRow;
  p.page_size = kPage;
  p.block_table = d.table;
  p.seq_lens = d.lens;
  p.n_rows = rows;
  p.n_heads = heads;
  p.row_width = kRow;
  p.value_width = kValue;
  p.max_len = bucket;
  p.scale = 1.0f / std::sqrt(192.0f);
  p.out = d.out_new;
  p.out_row_stride = heads * kValue;
  p.n_splits = k3::cuda::MlaPrefillSplits(rows, heads, bucket);
  EnsureWorkspace(d, static_cast<size_t>(k3::cuda::MlaPrefillWorkspaceBytes(type, bucket, rows, heads, kRow, kValue,
                                                                             p.n_splits)));
  p.workspace = d.ws;
  *splits_out = p.n_splits;
  const double ms = MedianMs([&] { CHECK(k3::cuda::MlaPrefill(p, nullptr)); }, 7);
  return {ms, Flops(heads, rows, pos) / (ms * 1e-3) / 1e12};
}

Result RunOld(Device& d, int64_t heads, int64_t rows, int64_t pos) {
  SetLens(d, rows, pos);
  k3::cuda::MlaDecodeParams p;
  p.q = d.q;
  p.q_seq_stride = heads * kRow;
  p.cache = d.cache32;
  p.cache_type = MlaCacheType::kF32;
  p.page_stride = d.page_stride;
  p.row_stride = kRow;
  p.page_size = kPage;
  p.block_table = d.table;
  p.block_table_stride = 0;  // every row reads the sequence's one table
  p.seq_lens = d.lens;
  p.n_seqs = rows;
  p.n_heads = heads;
  p.row_width = kRow;
  p.value_width = kValue;
  p.scale = 1.0f / std::sqrt(192.0f);
  p.out = d.out_old;
  p.out_seq_stride = heads * kValue;
  p.n_splits = k3::cuda::MlaDecodeSplits(rows, heads, Bucket(pos + rows));
  EnsureWorkspace(d, static_cast<size_t>(k3::cuda::MlaDecodeWorkspaceFloats(rows, heads, kValue, p.n_splits)) * 4);
  p.workspace = static_cast<float*>(d.ws);
  const double ms = MedianMs([&] { CHECK(k3::cuda::MlaDecode(p, nullptr)); }, 3);
  return {ms, Flops(heads, rows, pos) / (ms * 1e-3) / 1e12};
}

// Worst relative L2 per (row, head) of the new output against the old one.
double WorstRelL2(const Device& d, int64_t heads, int64_t rows) {
  const size_t n = static_cast<size_t>(rows * heads * kValue);
  std::vector<float> a(n), b(n);
  CHECK(cudaMemcpy(a.data(), d.out_new, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), d.out_old, n * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0.0;
  for (int64_t v = 0; v < rows * heads; ++v) {
    double num = 0.0, den = 0.0;
    for (int64_t k = 0; k < kValue; ++k) {
      const double x = a[v * kValue + k], y = b[v * kValue + k];
      num += (x - y) * (x - y);
      den += y * y;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-300));
    if (!(rel <= worst)) worst = std::isnan(rel) ? INFINITY : rel;
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const bool old = !(argc > 1 && std::strcmp(argv[1], "--no-old") == 0);
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  Device d;
  const int64_t n_pages = kMaxLen / kPage, pool_pages = n_pages + 8;
  {
    std::vector<float> q(static_cast<size_t>(kMaxRows * 96 * kRow));
    FillUniform(q, 1);
    CHECK(cudaMalloc(&d.q, q.size() * sizeof(float)));
    CHECK(cudaMemcpy(d.q, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> pool(static_cast<size_t>(pool_pages * d.page_stride));
    FillUniform(pool, 2);
    std::vector<uint16_t> pool16(pool.size());
    for (size_t i = 0; i < pool.size(); ++i) pool16[i] = k3::quant::F32ToF16(pool[i]);
    CHECK(cudaMalloc(&d.cache32, pool.size() * sizeof(float)));
    CHECK(cudaMemcpy(d.cache32, pool.data(), pool.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&d.cache16, pool16.size() * sizeof(uint16_t)));
    CHECK(cudaMemcpy(d.cache16, pool16.data(), pool16.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    std::vector<int32_t> table(pool_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(3));
    CHECK(cudaMalloc(&d.table, table.size() * sizeof(int32_t)));
    CHECK(cudaMemcpy(d.table, table.data(), table.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  CHECK(cudaMalloc(&d.lens, kMaxRows * sizeof(int32_t)));
  CHECK(cudaMalloc(&d.out_new, static_cast<size_t>(kMaxRows * 96 * kValue) * sizeof(float)));
  CHECK(cudaMalloc(&d.out_old, static_cast<size_t>(kMaxRows * 96 * kValue) * sizeof(float)));

  std::printf("\n%-34s %6s %10s %9s %10s %9s %8s %14s\n", "case", "splits", "new ms", "TFLOP/s", "old ms", "TFLOP/s",
              "speedup", "relL2 vs old");
  for (int64_t pos : {int64_t{0}, int64_t{2048}, int64_t{6144}}) {
    const int64_t rows = 2048, heads = 96;
    int splits = 0;
    const Result n = RunNew(d, heads, rows, pos, MlaCacheType::kF32, &splits);
    char name[64];
    std::snprintf(name, sizeof(name), "f32 h96 rows %lld pos %lld", static_cast<long long>(rows),
                  static_cast<long long>(pos));
    if (old) {
      const Result o = RunOld(d, heads, rows, pos);
      const double rel = WorstRelL2(d, heads, rows);
      std::printf("%-34s %6d %10.3f %9.1f %10.3f %9.1f %7.1fx %14.3e\n", name, splits, n.ms, n.tflops, o.ms, o.tflops,
                  o.ms / n.ms, rel);
    } else {
      std::printf("%-34s %6d %10.3f %9.1f\n", name, splits, n.ms, n.tflops);
    }
    std::fflush(stdout);
  }
  std::printf("\nnew kernel alone:\n");
  struct Extra {
    MlaCacheType type;
    int64_t heads, rows, pos;
  };
  const Extra extras[] = {
      {MlaCacheType::kF16, 96, 2048, 0},    {MlaCacheType::kF16, 96, 2048, 6144}, {MlaCacheType::kF32, 48, 2048, 6144},
      {MlaCacheType::kF32, 96, 512, 0},     {MlaCacheType::kF32, 96, 512, 8192},  {MlaCacheType::kF32, 96, 512, 32256},
      {MlaCacheType::kF32, 48, 512, 32256}, {MlaCacheType::kF32, 96, 64, 16384},  {MlaCacheType::kF32, 96, 1, 8191},
  };
  for (const Extra& e : extras) {
    int splits = 0;
    const Result n = RunNew(d, e.heads, e.rows, e.pos, e.type, &splits);
    char name[64];
    std::snprintf(name, sizeof(name), "%s h%lld rows %lld pos %lld", e.type == MlaCacheType::kF16 ? "f16" : "f32",
                  static_cast<long long>(e.heads), static_cast<long long>(e.rows), static_cast<long long>(e.pos));
    std::printf("%-34s %6d %10.3f %9.1f\n", name, splits, n.ms, n.tflops);
    std::fflush(stdout);
  }
  CHECK(cudaFree(d.q));
  CHECK(cudaFree(d.cache32));
  CHECK(cudaFree(d.cache16));
  CHECK(cudaFree(d.table));
  CHECK(cudaFree(d.lens));
  CHECK(cudaFree(d.out_new));
  CHECK(cudaFree(d.out_old));
  if (d.ws != nullptr) CHECK(cudaFree(d.ws));
  return 0;
}
