// A per-rank timeline that needs no external tool: spans (steps, layers, collectives) recorded
// in memory and written as Chrome trace JSON (opens in Perfetto / chrome://tracing); one file
// per rank, merged by launch/merge_traces.py. Off costs one branch per span: a null Tracer*.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace k3 {

class Tracer {
 public:
  // `pid` is the process id in the trace (the rank); `name` labels it ("group0 rank 1").
  Tracer(int pid, std::string name, size_t max_events = 1 << 20);

  int64_t NowUs() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
  }
  // A complete span [begin_us, now). Dropped (and counted) past max_events.
  void Span(const char* name, const char* category, int64_t begin_us, int64_t arg = -1);

  std::string ToJson() const;
  absl::Status WriteFile(const std::string& path) const;
  size_t size() const;
  size_t dropped() const;

 private:
  struct Event {
    const char* name;      // static strings only: no allocation per span
    const char* category;
    int64_t ts_us, dur_us, arg;
  };
  int pid_;
  std::string name_;
  size_t max_events_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
};

// Records [construction, destruction) when the tracer is not null.
class TraceScope {
 public:
  TraceScope(Tracer* t, const char* name, const char* category, int64_t arg = -1)
      : t_(t), name_(name), category_(category), arg_(arg), begin_(t ? t->NowUs() : 0) {}
  ~TraceScope() {
    if (t_) t_->Span(name_, category_, begin_, arg_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* t_;
  const char* name_;
  const char* category_;
  int64_t arg_;
  int64_t begin_;
};

}  // namespace k3
