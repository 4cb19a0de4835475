#include "coordinator/server/group_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/server/step_plan.h"
#include "spdlog/spdlog.h"

namespace k3::coord {

using Clock = std::chrono::steady_clock;

namespace {

// One line per step at debug level (SPDLOG_LEVEL=debug), the coordinator's side of a step's
// latency: the RPC's wall time beside the leader's own step time (the difference is transport
// and the leader's handler), the time since the previous step's outputs were applied (building
// this step, or idling when there was nothing to run) and applying this step's outputs
// (sampling, detokenizing, handing tokens to the streams). bench/device/system_slice_run.sh
// reads these lines.
void LogStepTiming(const k3::v1::StepRequest& step, Clock::time_point prev_end, Clock::time_point sent,
                   Clock::time_point answered, Clock::time_point applied, double leader_ms) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  int64_t tokens = 0;
  for (const auto& e : step.entries()) tokens += e.tokens_size();
  auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  spdlog::debug("step {}: {} entries {} tokens; since last {:.1f} us, rpc {:.1f} us, leader {:.1f} us, apply {:.1f} us",
                step.id(), step.entries_size(), tokens, us(sent - prev_end), us(answered - sent), leader_ms * 1000,
                us(applied - answered));
}

}  // namespace

struct GroupScheduler::Running {
  std::unique_ptr<GenerationRequest> req;
  int64_t seq = 0;
  size_t prefilled = 0;            // prompt tokens already sent
  int32_t next_input = -1;         // the last chosen token, fed in the next step
  std::vector<int32_t> generated;
  std::optional<tok::IncrementalDetokenizer> detok;
  StopMatcher stop;
  int64_t reserved = 0;            // cache tokens reserved for this sequence
  bool streamed = false;
  bool done = false;               // finished (its final event is sent); freed next step
  Clock::time_point last_token;
  Clock::time_point first_token;
  explicit Running(std::unique_ptr<GenerationRequest> r) : req(std::move(r)), stop(req->stop) {}
};

GroupScheduler::GroupScheduler(std::string address, const tok::Tokenizer* tokenizer, SchedulerOptions options,
                               Metrics* metrics, Retry retry)
    : client_(std::move(address), options.link),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      retry_(std::move(retry)) {}

GroupScheduler::~GroupScheduler() { Stop(); }

void GroupScheduler::Start() { thread_ = std::thread([this] { Loop(); }); }

void GroupScheduler::Stop() {
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<k3::v1::WorkerInfo> GroupScheduler::info() const {
  std::lock_guard<std::mutex> l(mu_);
  return info_;
}

absl::Status GroupScheduler::Submit(std::unique_ptr<GenerationRequest>& req) {
  if (!healthy_) return absl::UnavailableError(absl::StrCat("worker group ", address(), " is down"));
  std::lock_guard<std::mutex> l(mu_);
  if (static_cast<int64_t>(incoming_.size()) + load_.load() >= options_.max_queue + (info_ ? info_->max_seqs() : 0)) {
    return absl::ResourceExhaustedError(absl::StrCat("worker group ", address(), ": queue full (", options_.max_queue,
                                                     " waiting); retry later"));
  }
  ++load_;
  incoming_.push_back(std::move(req));
  cv_.notify_all();
  return absl::OkStatus();
}

bool GroupScheduler::CheckHealth() {
  auto info = client_.GetInfo(std::chrono::milliseconds(2000));
  if (!info.ok()) {
    // Once per reason: a leader that refuses our token or TLS is a configuration error to see.
    std::string why = absl::StrCat(absl::StatusCodeToString(info.status().code()), ": ", info.status().message());
    if (why != health_error_) {
      spdlog::warn("health check of worker group {} failed: {}", address(), why);
      health_error_ = std::move(why);
    }
    return false;
  }
  health_error_.clear();
  std::lock_guard<std::mutex> l(mu_);
  info_ = *info;
  return true;
}

void GroupScheduler::Finish(Running& r, k3::v1::FinishReason reason, const absl::Status& error) {
  StreamEvent e;
  e.final = true;
  e.error = error;
  if (error.ok()) {
    std::string tail = r.stop.Flush();
    if (r.detok && reason != k3::v1::FINISH_REASON_STOP) tail += r.detok->Finish();
    e.response.set_text(tail);
    e.response.set_finish_reason(reason);
    e.response.set_seed(r.req->chooser->seed());
    e.response.set_request_id(r.req->id);
    auto* u = e.response.mutable_usage();
    u->set_prompt_tokens(static_cast<uint32_t>(r.req->prompt.size()));
    u->set_completion_tokens(static_cast<uint32_t>(r.generated.size()));
    if (!r.generated.empty()) {
      u->set_time_to_first_token_ms(std::chrono::duration<double, std::milli>(r.first_token - r.req->arrived).count());
      const double decode_s = std::chrono::duration<double>(r.last_token - r.first_token).count();
      if (r.generated.size() > 1 && decode_s > 0) u->set_decode_tokens_per_second((r.generated.size() - 1) / decode_s);
    }
  } else {
    ++metrics_->requests_failed;
  }
  if (reason == k3::v1::FINISH_REASON_CANCELLED) ++metrics_->requests_cancelled;
  r.req->channel->Push(std::move(e));
}

void GroupScheduler::FailAll(const absl::Status& why) {
  // Requests that streamed nothing may move to another group; the rest fail with the reason.
  for (auto& r : running_) {
    if (!r->streamed && retry_ && retry_(r->req)) continue;
    if (r->req) Finish(*r, k3::v1::FINISH_REASON_UNSPECIFIED, why);
  }
  running_.clear();
  for (auto& q : queue_) {
    if (retry_ && retry_(q)) continue;
    StreamEvent e;
    e.final = true;
    e.error = why;
    q->channel->Push(std::move(e));
  }
  queue_.clear();
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& q : incoming_) {
      StreamEvent e;
      e.final = true;
      e.error = why;
      q->channel->Push(std::move(e));
    }
    incoming_.clear();
  }
  to_free_.clear();
  reserved_tokens_ = 0;
  load_ = 0;
}

void GroupScheduler::TakeNewRequests() {
  std::lock_guard<std::mutex> l(mu_);
  while (!incoming_.empty()) {
    queue_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

void GroupScheduler::DropCancelled(std::vector<int64_t>& free) {
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->req->channel->cancelled()) {
      free.push_back((*it)->seq);
      reserved_tokens_ -= (*it)->reserved;
      Finish(**it, k3::v1::FINISH_REASON_CANCELLED);
      --load_;
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->channel->cancelled()) {
      StreamEvent e;
      e.final = true;
      e.response.set_finish_reason(k3::v1::FINISH_REASON_CANCELLED);
      (*it)->channel->Push(std::move(e));
      ++metrics_->requests_cancelled;
      --load_;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

// Admission in arrival order (no overtaking, so no request starves): a request enters when a
// slot is free and the cache can hold its prompt plus its whole token budget.
void GroupScheduler::Admit(k3::v1::StepRequest& step) {
  const auto info = this->info();
  if (!info) return;
  const int64_t slots = static_cast<int64_t>(info->max_seqs());
  const int64_t page = std::max<int64_t>(1, info->page_size());
  const int64_t capacity = static_cast<int64_t>(info->cache_tokens());
  while (!queue_.empty() && static_cast<int64_t>(running_.size()) < slots) {
    GenerationRequest& q = *queue_.front();
    const int64_t need = (static_cast<int64_t>(q.prompt.size() + q.max_tokens) + page - 1) / page * page + page;
    if (need > capacity) {
      // Can never fit: refuse instead of waiting forever.
      StreamEvent e;
      e.final = true;
      e.error = absl::ResourceExhaustedError(absl::StrCat("request needs ", need, " cache tokens; the worker group holds ",
                                                          capacity, ": lower max_tokens or the prompt"));
      q.channel->Push(std::move(e));
      --load_;
      queue_.pop_front();
      continue;
    }
    if (reserved_tokens_ + need > capacity) break;
    auto r = std::make_unique<Running>(std::move(queue_.front()));
    queue_.pop_front();
    r->seq = next_seq_++;
    r->reserved = need;
    if (tokenizer_) r->detok.emplace(*tokenizer_, /*include_special=*/false);
    reserved_tokens_ += need;
    step.add_add(r->seq);
    metrics_->prompt_tokens += r->req->prompt.size();
    running_.push_back(std::move(r));
  }
}

bool GroupScheduler::Accept(Running& r, const k3::v1::RowOutput& row) {
  auto choice = r.req->chooser->Choose(row);
  if (!choice.ok()) {
    Finish(r, k3::v1::FINISH_REASON_UNSPECIFIED, choice.status());
    return true;
  }
  const auto now = Clock::now();
  if (r.generated.empty()) {
    r.first_token = now;
    metrics_->ttft_seconds.Observe(std::chrono::duration<double>(now - r.req->arrived).count());
  } else {
    metrics_->itl_seconds.Observe(std::chrono::duration<double>(now - r.last_token).count());
  }
  r.last_token = now;
  const int32_t token = choice->token;
  r.generated.push_back(token);
  r.next_input = token;
  ++metrics_->generated_tokens;

  const bool is_stop_token = std::find(r.req->stop_ids.begin(), r.req->stop_ids.end(), token) != r.req->stop_ids.end();
  StreamEvent e;
  auto* ti = e.response.add_tokens();
  ti->set_token(token);
  ti->set_logprob(choice->logprob);
  for (const auto& [id, lp] : choice->top) {
    auto* t = ti->add_top();
    t->set_token(id);
    t->set_logprob(lp);
    if (tokenizer_) {
      auto bytes = tokenizer_->TokenBytes(id);
      if (bytes.ok()) t->set_text(std::string(*bytes));
    }
  }
  bool stopped = is_stop_token;
  if (!is_stop_token && r.detok) {
    auto text = r.detok->Feed(token);
    if (text.ok()) {
      StopMatcher::Result m = r.stop.Feed(*text);
      e.response.set_text(m.text);
      stopped = m.stopped;
    }
  }
  if (r.generated.size() == 1 && !r.streamed) e.response.set_request_id(r.req->id);
  r.streamed = true;
  r.req->channel->Push(std::move(e));
  if (stopped) {
    Finish(r, k3::v1::FINISH_REASON_STOP);
    return true;
  }
  if (r.generated.size() >= r.req->max_tokens) {
    Finish(r, k3::v1::FINISH_REASON_LENGTH);
    return true;
  }
  return false;
}

void GroupScheduler::Loop() {
  auto last_health = Clock::now() - options_.health_period;
  auto prev_end = Clock::now();  // when the previous step's outputs were applied
  while (!stop_) {
    if (!healthy_) {
      if (Clock::now() - last_health >= options_.health_period) {
        last_health = Clock::now();
        // Down, this scheduler holds nothing on the group (FailAll): a new session makes the
        // leader free whatever sequences are left there, ours or a crashed coordinator's.
        client_.NewSession();
        if (CheckHealth()) {
          // A (re)started group has an empty cache: sequence ids start over.
          healthy_ = true;
          spdlog::info("worker group {} is up", address());
        }
      }
      if (!healthy_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
    }
    TakeNewRequests();
    k3::v1::StepRequest step;
    std::vector<int64_t> free;
    DropCancelled(free);
    Admit(step);
    metrics_->queued = static_cast<int64_t>(queue_.size());
    for (int64_t id : to_free_) step.add_free(id);
    for (int64_t id : free) step.add_free(id);
    to_free_.clear();

    // One decode token per sequence in generation, then prompt chunks within the budget (PlanStep).
    std::vector<SeqState> states;
    states.reserve(running_.size());
    for (const auto& r : running_) {
      const int64_t left = static_cast<int64_t>(r->req->prompt.size() - r->prefilled);
      states.push_back({left == 0 && r->next_input >= 0, left});
    }
    const std::vector<int64_t> plan =
        PlanStep(states, {options_.token_budget, options_.prefill_chunk, options_.idle_prefill_chunk});
    std::vector<std::pair<Running*, int64_t>> in_step;  // (sequence, prompt tokens sent; 0 = decode)
    size_t i = 0;
    for (auto& r : running_) {
      const int64_t n = plan[i++];
      if (n < 0) continue;
      auto* e = step.add_entries();
      e->set_seq(r->seq);
      if (n == 0) {
        e->add_tokens(r->next_input);
        e->set_top_n(r->req->chooser->top_n());
        e->set_full_logits(r->req->chooser->needs_full_logits());
      } else {
        for (int64_t k = 0; k < n; ++k) e->add_tokens(r->req->prompt[r->prefilled + k]);
        const bool completes = n == states[i - 1].prompt_left;
        e->set_top_n(completes ? r->req->chooser->top_n() : 1);
        e->set_full_logits(completes && r->req->chooser->needs_full_logits());
      }
      in_step.push_back({r.get(), n});
    }
    metrics_->running = static_cast<int64_t>(running_.size());
    if (step.entries_size() == 0 && step.free_size() == 0 && step.add_size() == 0) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(20), [&] { return !incoming_.empty() || stop_; });
      if (Clock::now() - last_health >= options_.health_period) {
        l.unlock();
        last_health = Clock::now();
        if (!CheckHealth()) {
          healthy_ = false;
          spdlog::warn("worker group {} stopped answering", address());
          FailAll(absl::UnavailableError(absl::StrCat("worker group ", address(), " is down")));
        }
      }
      continue;
    }
    step.set_id(next_step_++);
    const auto t0 = Clock::now();
    auto resp = client_.RunStep(step, options_.step_timeout, options_.step_poll);
    const auto t1 = Clock::now();
    metrics_->step_seconds.Observe(std::chrono::duration<double>(t1 - t0).count());
    ++metrics_->steps;
    ++steps_;
    if (!resp.ok()) {
      const bool group_down = resp.status().code() == absl::StatusCode::kUnavailable ||
                              resp.status().code() == absl::StatusCode::kDeadlineExceeded;
      spdlog::error("step {} on {} failed: {}", step.id(), address(), std::string(resp.status().message()));
      if (group_down) healthy_ = false;
      FailAll(absl::UnavailableError(absl::StrCat("worker group ", address(), " failed: ", resp.status().message())));
      continue;
    }
    // Apply the outputs.
    for (size_t i = 0; i < in_step.size(); ++i) {
      Running& r = *in_step[i].first;
      r.prefilled += in_step[i].second;
      if (r.prefilled < r.req->prompt.size()) continue;  // a prompt chunk that does not end it
      if (r.req->channel->cancelled()) continue;          // dropped at the top of the next step
      if (i >= static_cast<size_t>(resp->entries_size()) || resp->entries(i).rows_size() == 0) {
        Finish(r, k3::v1::FINISH_REASON_UNSPECIFIED, absl::InternalError("worker returned no output row"));
        r.done = true;
        continue;
      }
      r.done = Accept(r, resp->entries(i).rows(0));
    }
    LogStepTiming(step, prev_end, t0, t1, Clock::now(), resp->step_ms());
    prev_end = Clock::now();  // after the log line: its own cost is not the next step's
    // Finished sequences leave now; their cache is freed with the next step.
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->done) {
        to_free_.push_back((*it)->seq);
        reserved_tokens_ -= (*it)->reserved;
        --load_;
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace k3::coord
