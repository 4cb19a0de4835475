// Server counters and latency histograms, rendered in the Prometheus text format.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace k3::coord {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double v);
  std::string Render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

struct Metrics {
  std::atomic<uint64_t> requests_total{0}, requests_failed{0}, requests_cancelled{0};
  std::atomic<uint64_t> prompt_tokens{0}, generated_tokens{0}, steps{0};
  std::atomic<int64_t> queued{0}, running{0};
  std::atomic<int64_t> groups_up{0}, groups_total{0};
  Histogram ttft_seconds{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram itl_seconds{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  Histogram step_seconds{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}};
  std::string Render() const;
};

}  // namespace k3::coord
