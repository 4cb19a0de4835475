// Cost of the per-rank timeline: one span recorded (tracing on) and one skipped (tracing off,
// a null Tracer*). A forward pass records 2 + 2*n_layers + 2 spans (≈ 190 for K3).
#include <chrono>
#include <cstdio>

#include "worker/common/trace.h"

int main() {
  using Clock = std::chrono::steady_clock;
  constexpr int kN = 2'000'000;
  k3::Tracer tracer(0, "bench", kN);
  k3::Tracer* off = nullptr;
  volatile int sink = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < kN; ++i) {
    k3::TraceScope s(off, "x", "y", i);
    sink = sink + 1;
  }
  auto t1 = Clock::now();
  for (int i = 0; i < kN; ++i) {
    k3::TraceScope s(&tracer, "x", "y", i);
    sink = sink + 1;
  }
  auto t2 = Clock::now();
  const double off_ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / kN;
  const double on_ns = std::chrono::duration<double, std::nano>(t2 - t1).count() / kN;
  std::printf("span, tracing off: %.1f ns; tracing on: %.1f ns (%zu recorded)\n", off_ns, on_ns, tracer.size());
  std::printf("per K3 forward pass (190 spans): off %.2f us, on %.2f us\n", 190 * off_ns / 1e3, 190 * on_ns / 1e3);
  return 0;
}
