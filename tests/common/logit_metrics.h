// Comparing logits the way shared/data/golden/README.md does: relative L2 over a whole prompt,
// KL(ref || got) of the softmaxes per position, top-1 agreement.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace k3::testing {

struct LogitComparison {
  double rel_l2 = 0;
  double kl_max = 0;
  double kl_mean = 0;
  double top1 = 0;  // fraction of positions whose argmax agrees
};

inline LogitComparison CompareLogits(const float* ref, const float* got, int64_t rows, int64_t vocab) {
  LogitComparison r;
  double num = 0, den = 0;
  int64_t agree = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* a = ref + i * vocab;
    const float* b = got + i * vocab;
    double ma = -INFINITY, mb = -INFINITY;
    int64_t ia = 0, ib = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      num += (static_cast<double>(a[v]) - b[v]) * (static_cast<double>(a[v]) - b[v]);
      den += static_cast<double>(a[v]) * a[v];
      if (a[v] > ma) { ma = a[v]; ia = v; }
      if (b[v] > mb) { mb = b[v]; ib = v; }
    }
    agree += ia == ib;
    double za = 0, zb = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      za += std::exp(a[v] - ma);
      zb += std::exp(b[v] - mb);
    }
    const double lza = std::log(za) + ma, lzb = std::log(zb) + mb;
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double la = a[v] - lza, lb = b[v] - lzb;
      kl += std::exp(la) * (la - lb);
    }
    r.kl_max = std::max(r.kl_max, kl);
    r.kl_mean += kl / rows;
  }
  r.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
  r.top1 = rows > 0 ? static_cast<double>(agree) / rows : 1.0;
  return r;
}

inline double RelL2(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (static_cast<double>(ref[i]) - got[i]) * (static_cast<double>(ref[i]) - got[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamsize n = in.tellg();
  in.seekg(0);
  std::vector<float> v(static_cast<size_t>(n) / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

}  // namespace k3::testing
