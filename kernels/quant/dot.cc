#include "kernels/quant/dot.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/quant/decode.h"

namespace k3::quant {
namespace {

constexpr int kLanes = 16;
// Elements decoded per step: DotRow keeps them on the stack; MatMul keeps kRowGroup rows of them
// plus one token's x chunk in L1. Both are multiples of every block size (256) and of kLanes.
constexpr int64_t kDotChunk = 256;
constexpr int64_t kMatChunk = 1024;
// MatMul decodes this many rows side by side so each x chunk is reused from L1 by all of them.
constexpr int64_t kRowGroup = 4;

struct alignas(64) Lanes {
  float v[kLanes] = {};
};

// Adds w[i]*x[i] to lane i % kLanes. Callers start every chunk at a multiple of kLanes, so the
// lane of an element is its index in the row mod kLanes however the row is chunked. The lanes
// are independent chains, which lets the compiler vectorize without reassociating anything.
inline void Accumulate(Lanes& acc, const float* w, const float* x, int64_t n) {
  float a[kLanes];
  for (int l = 0; l < kLanes; ++l) a[l] = acc.v[l];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) a[l] += w[i + l] * x[i + l];
  }
  for (int l = 0; i + l < n; ++l) a[l] += w[i + l] * x[i + l];
  for (int l = 0; l < kLanes; ++l) acc.v[l] = a[l];
}

inline float Reduce(const Lanes& acc) {
  float s[kLanes];
  for (int l = 0; l < kLanes; ++l) s[l] = acc.v[l];
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) s[l] += s[l + width];
  }
  return s[0];
}

const Decoder& CheckedDecoder(GgmlType type, int64_t n, const char* who) {
  const Decoder* dec = FindDecoder(type);
  if (dec == nullptr || n < 0 || n % dec->block_elems != 0) {
    std::fprintf(stderr, "%s: bad call (type %.*s, %lld elements per row)\n", who,
                 static_cast<int>(TypeName(type).size()), TypeName(type).data(), static_cast<long long>(n));
    std::abort();
  }
  return *dec;
}

}  // namespace

float DotRow(GgmlType type, const void* row, const float* x, int64_t n) {
  const Decoder& dec = CheckedDecoder(type, n, "DotRow");
  Lanes acc;
  if (type == GgmlType::kF32) {
    Accumulate(acc, static_cast<const float*>(row), x, n);
    return Reduce(acc);
  }
  const auto* src = static_cast<const uint8_t*>(row);
  const int64_t be = dec.block_elems;
  const int64_t chunk_blocks = kDotChunk / be;
  const int64_t n_blocks = n / be;
  alignas(64) float buf[kDotChunk];
  for (int64_t b = 0; b < n_blocks; b += chunk_blocks) {
    const int64_t nb = std::min(chunk_blocks, n_blocks - b);
    dec.decode(src + b * dec.block_bytes, buf, nb);
    Accumulate(acc, buf, x + b * be, nb * be);
  }
  return Reduce(acc);
}

void MatMul(const QuantMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y, int64_t y_stride) {
  const Decoder& dec = CheckedDecoder(w.type, w.cols, "MatMul");
  if (w.rows <= 0 || n_tokens <= 0) return;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t be = dec.block_elems;
  const int64_t cols = w.cols;
  const int64_t chunk = std::min(kMatChunk, cols);
  const int64_t n_groups = (w.rows + kRowGroup - 1) / kRowGroup;
  const bool is_f32 = w.type == GgmlType::kF32;
  // Threads only pay off with enough work: a parallel region costs a wake-up and a barrier,
  // which on a loaded machine can take milliseconds (a descheduled thread holds the barrier).
  // ~4M multiply-adds (about a millisecond on one core) is the threshold. The result does not
  // depend on the thread count.
  const bool parallel = w.rows * cols * n_tokens >= (int64_t{1} << 22) && n_groups > 1;

#pragma omp parallel if (parallel)
  {
    std::vector<float> buf(static_cast<size_t>(kRowGroup * chunk));
    std::vector<Lanes> acc(static_cast<size_t>(kRowGroup * n_tokens));
#pragma omp for schedule(dynamic, 1)  // dynamic: a busy core does not hold up the others
    for (int64_t g = 0; g < n_groups; ++g) {
      const int64_t r0 = g * kRowGroup;
      const int64_t nr = std::min(kRowGroup, w.rows - r0);
      std::fill(acc.begin(), acc.end(), Lanes{});
      for (int64_t c0 = 0; c0 < cols; c0 += chunk) {
        const int64_t nc = std::min(chunk, cols - c0);
        const float* wv[kRowGroup];
        for (int64_t k = 0; k < nr; ++k) {
          const uint8_t* row = data + (r0 + k) * w.row_bytes;
          if (is_f32) {
            wv[k] = reinterpret_cast<const float*>(row) + c0;
          } else {
            dec.decode(row + (c0 / be) * dec.block_bytes, buf.data() + k * chunk, nc / be);
            wv[k] = buf.data() + k * chunk;
          }
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
          const float* xt = x + t * x_stride + c0;
          for (int64_t k = 0; k < nr; ++k) Accumulate(acc[t * kRowGroup + k], wv[k], xt, nc);
        }
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t k = 0; k < nr; ++k) y[t * y_stride + r0 + k] = Reduce(acc[t * kRowGroup + k]);
      }
    }
  }
}

}  // namespace k3::quant
