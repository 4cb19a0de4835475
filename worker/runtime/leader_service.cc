#include "worker/runtime/leader_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace k3::runtime {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

namespace {

Step FromProto(const k3::v1::StepRequest& r) {
  Step s;
  s.id = r.id();
  s.free.assign(r.free().begin(), r.free().end());
  s.add.assign(r.add().begin(), r.add().end());
  for (const auto& f : r.fork()) s.fork.push_back({f.src(), f.dst()});
  for (const auto& e : r.entries()) {
    s.entries.push_back({e.seq(), std::vector<int32_t>(e.tokens().begin(), e.tokens().end()),
                         e.top_n() > 0 ? e.top_n() : 1, e.full_logits(), e.all_positions()});
  }
  s.shutdown = r.shutdown();
  return s;
}

// Failures of the group itself (as opposed to a bad step): the group cannot go on.
bool IsGroupFailure(const absl::Status& s) {
  return s.code() == absl::StatusCode::kDeadlineExceeded || s.code() == absl::StatusCode::kInternal ||
         s.code() == absl::StatusCode::kUnavailable;
}

}  // namespace

LeaderService::Activity::Activity(LeaderService& s) : s_(s) { ++s_.active_; }

LeaderService::Activity::~Activity() {
  s_.last_call_ns_ = std::chrono::steady_clock::now().time_since_epoch().count();
  --s_.active_;
}

std::chrono::steady_clock::duration LeaderService::idle() const {
  if (active_.load() > 0) return std::chrono::steady_clock::duration::zero();
  const std::chrono::steady_clock::time_point last{std::chrono::steady_clock::duration(last_call_ns_.load())};
  return std::chrono::steady_clock::now() - last;
}

grpc::Status LeaderService::RunStep(grpc::ServerContext* ctx, const k3::v1::StepRequest* req,
                                    k3::v1::StepResponse* resp) {
  // Before anything else: a caller without the token learns nothing and keeps nothing alive.
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;
  return ToGrpc(Run(*req, resp));
}

absl::Status LeaderService::Run(const k3::v1::StepRequest& req, k3::v1::StepResponse* resp) {
  const auto entered = std::chrono::steady_clock::now();
  Activity activity(*this);
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_ || shut_down_) {
    return absl::UnavailableError("worker group is down (a rank failed or it is shutting down)");
  }
  Step step = FromProto(req);
  if (step.shutdown) return absl::InvalidArgumentError("shutdown is not accepted over RPC");
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<StepResult> result = group_.LeaderStep(step);
  const auto stepped = std::chrono::steady_clock::now();
  Track(step, result.ok());
  if (!result.ok()) {
    if (IsGroupFailure(result.status())) {
      broken_ = true;
      spdlog::error("worker group failed: {}", std::string(result.status().message()));
      return absl::UnavailableError(absl::StrCat("worker group failed: ", result.status().message()));
    }
    return result.status();
  }
  resp->set_id(result->id);
  for (const auto& rows : result->rows) {
    auto* entry = resp->add_entries();
    for (const RowOutput& row : rows) {
      auto* r = entry->add_rows();
      r->set_logsumexp(row.logsumexp);
      for (const Candidate& c : row.top) {
        auto* pc = r->add_top();
        pc->set_token(c.token);
        pc->set_logit(c.logit);
      }
      r->mutable_logits()->Assign(row.logits.begin(), row.logits.end());
    }
  }
  const auto replied = std::chrono::steady_clock::now();
  resp->set_step_ms(std::chrono::duration<double, std::milli>(replied - t0).count());
  // The leader's side of a step's latency (SPDLOG_LEVEL=debug): the group's step (broadcast,
  // forward, gather, merge) and this handler's own work around it (lock, decoding the request,
  // building the reply); the coordinator logs the call's wall time for the same id.
  if (spdlog::should_log(spdlog::level::debug)) {
    auto us = [](std::chrono::steady_clock::duration d) {
      return std::chrono::duration<double, std::micro>(d).count();
    };
    spdlog::debug("step {}: group {:.1f} us; handler {:.1f} us before, {:.1f} us after", req.id(), us(stepped - t0),
                  us(t0 - entered), us(replied - stepped));
  }
  return absl::OkStatus();
}

void LeaderService::Track(const Step& step, bool ok) {
  for (int64_t id : step.add) live_.insert(id);
  for (const auto& f : step.fork) live_.insert(f.second);
  if (ok) {
    for (int64_t id : step.free) live_.erase(id);
  }
}

absl::Status LeaderService::FreeAll() {
  size_t freed = 0;
  for (int64_t id : live_) {
    Step s;
    s.id = ~uint64_t{1};
    s.free = {id};
    absl::StatusOr<StepResult> r = group_.LeaderStep(s);
    if (r.ok()) {
      ++freed;
    } else if (IsGroupFailure(r.status())) {
      broken_ = true;
      spdlog::error("worker group failed: {}", std::string(r.status().message()));
      return r.status();
    }
  }
  if (!live_.empty()) {
    spdlog::warn("a new coordinator took over: freed {} sequence(s) the previous one left", freed);
  }
  live_.clear();
  return absl::OkStatus();
}

grpc::Status LeaderService::GetInfo(grpc::ServerContext* ctx, const k3::v1::WorkerInfoRequest* req,
                                    k3::v1::WorkerInfo* resp) {
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;
  Activity activity(*this);
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker group is down");
  // A coordinator restarted after a crash numbers its sequences from 1 again and counts on every
  // slot: what its predecessor left would collide with its ids and hold slots forever.
  if (req->session() != 0 && req->session() != session_) {
    if (!live_.empty() && !shut_down_) {
      if (absl::Status s = FreeAll(); !s.ok()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("worker group failed: ", s.message()));
      }
    }
    session_ = req->session();
  }
  resp->set_model_name(info_.model_name);
  resp->set_model_summary(info_.model_summary);
  resp->set_plan(info_.plan);
  resp->set_ranks(info_.ranks);
  resp->set_max_seqs(info_.max_seqs);
  resp->set_cache_tokens(info_.cache_tokens);
  resp->set_step_port(info_.step_port);
  resp->set_page_size(info_.page_size);
  resp->set_vocab(info_.vocab);
  resp->set_context_length(info_.context_length);
  resp->set_free_slots(static_cast<uint32_t>(engine_.free_slots()));
  resp->set_free_pages(static_cast<uint64_t>(engine_.free_cache_tokens() / std::max<uint32_t>(1, info_.page_size)));
  return grpc::Status::OK;
}

absl::Status LeaderService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_ || broken_) return absl::OkStatus();
  shut_down_ = true;
  Step s;
  s.id = ~0ull;
  s.shutdown = true;
  return group_.LeaderStep(s).status();
}

}  // namespace k3::runtime
