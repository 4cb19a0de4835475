// Continuous batching for one worker group: admits queued requests while the group has
// sequence slots and cache room for their whole budget (so the cache can never overflow), and
// builds each step from one decode token per running sequence plus prompt chunks (chunked
// prefill) within a token budget, so long prompts do not stall running streams (step_plan.h; with
// no stream running, prompts go in large chunks).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "coordinator/server/metrics.h"
#include "coordinator/server/request.h"
#include "coordinator/server/stop_matcher.h"
#include "coordinator/server/worker_client.h"
#include "coordinator/tokenizer/detokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace k3::coord {

struct SchedulerOptions {
  int64_t token_budget = 512;     // tokens per step (decode tokens + prefill chunks)
  int64_t prefill_chunk = 256;    // most prompt tokens of one sequence in one step
  // The same when no sequence is decoding (step_plan.h): a lone prompt in large steps. At most
  // prefill_chunk disables it.
  int64_t idle_prefill_chunk = 16384;
  int64_t max_queue = 256;        // queued requests beyond this are refused
  std::chrono::milliseconds step_timeout{300000};
  // After sending a step, poll for its reply this long before sleeping (0: sleep at once). Costs a
  // busy core per worker group while steps run; saves waking a thread that slept through the step.
  std::chrono::microseconds step_poll{0};
  std::chrono::milliseconds health_period{1000};
  WorkerLink link;                // token and TLS towards the leaders
};

class GroupScheduler {
 public:
  // Called with a request that had streamed nothing when its group failed: the router may
  // place it on another group. Returns false if it could not (the request then fails).
  using Retry = std::function<bool(std::unique_ptr<GenerationRequest>&)>;

  GroupScheduler(std::string address, const tok::Tokenizer* tokenizer, SchedulerOptions options,
                 Metrics* metrics, Retry retry);
  ~GroupScheduler();

  void Start();
  void Stop();

  // Queues a request. ResourceExhausted when the queue is full; Unavailable when the group is down.
  absl::Status Submit(std::unique_ptr<GenerationRequest>& req);

  bool healthy() const { return healthy_.load(); }
  int64_t load() const { return load_.load(); }
  const std::string& address() const { return client_.address(); }
  uint64_t steps() const { return steps_.load(); }
  std::optional<k3::v1::WorkerInfo> info() const;

 private:
  struct Running;
  void Loop();
  bool CheckHealth();
  void FailAll(const absl::Status& why);
  void TakeNewRequests();
  void DropCancelled(std::vector<int64_t>& free);
  void Admit(k3::v1::StepRequest& step);
  // Applies one chosen token; returns true when the sequence finished.
  bool Accept(Running& r, const k3::v1::RowOutput& row);
  void Finish(Running& r, k3::v1::FinishReason reason, const absl::Status& error = absl::OkStatus());

  WorkerClient client_;
  const tok::Tokenizer* tokenizer_;  // null for a model without a vocabulary
  SchedulerOptions options_;
  Metrics* metrics_;
  Retry retry_;

  mutable std::mutex mu_;  // guards incoming_ and info_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<GenerationRequest>> incoming_;
  std::optional<k3::v1::WorkerInfo> info_;

  // Owned by the loop thread.
  std::deque<std::unique_ptr<GenerationRequest>> queue_;
  std::list<std::unique_ptr<Running>> running_;
  std::vector<int64_t> to_free_;
  int64_t next_seq_ = 1;
  uint64_t next_step_ = 1;
  int64_t reserved_tokens_ = 0;

  std::atomic<bool> healthy_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> load_{0};
  std::atomic<uint64_t> steps_{0};
  std::string health_error_;      // the last failed health check's reason, logged once
  std::thread thread_;
};

}  // namespace k3::coord
