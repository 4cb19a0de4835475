// One generation request inside the coordinator: its input, limits, per-sequence sampler and
// the channel its stream is written from.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "k3/v1/inference.pb.h"
#include "k3/v1/worker.pb.h"

namespace k3::coord {

// Chooses the next token of one sequence from the group's merged output row.
class TokenChooser {
 public:
  struct Choice {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // alternatives, when logprobs were asked for
  };
  virtual ~TokenChooser() = default;
  virtual absl::StatusOr<Choice> Choose(const k3::v1::RowOutput& row) = 0;
  virtual int32_t top_n() const = 0;             // candidates the step must return
  virtual bool needs_full_logits() const = 0;    // when candidates cannot be exact
  virtual uint64_t seed() const = 0;
};

// What the scheduler tells the RPC handler.
struct StreamEvent {
  k3::v1::GenerateResponse response;
  bool final = false;
  absl::Status error;  // when not OK: the stream ends with this status
};

// Scheduler -> RPC handler, thread safe. Cancel() comes from the handler (client gone).
class RequestChannel {
 public:
  void Push(StreamEvent e) {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back(std::move(e));
    cv_.notify_all();
  }
  // Waits up to `wait` for an event.
  std::optional<StreamEvent> Pop(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, wait, [&] { return !events_.empty(); })) return std::nullopt;
    StreamEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct GenerationRequest {
  std::string id;
  std::vector<int32_t> prompt;
  uint32_t max_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;  // the model's EOS included unless ignore_eos
  int32_t n_logprobs = 0;
  std::unique_ptr<TokenChooser> chooser;
  std::shared_ptr<RequestChannel> channel;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

}  // namespace k3::coord
