#include "coordinator/server/router.h"

#include <algorithm>

namespace k3::coord {

Router::Router(const std::vector<std::string>& addresses, const tok::Tokenizer* tokenizer, SchedulerOptions options,
               Metrics* metrics)
    : metrics_(metrics) {
  for (const std::string& a : addresses) {
    groups_.push_back(std::make_unique<GroupScheduler>(
        a, tokenizer, options, metrics, [this](std::unique_ptr<GenerationRequest>& r) { return Submit(r).ok(); }));
  }
  metrics_->groups_total = static_cast<int64_t>(groups_.size());
}

Router::~Router() { Stop(); }

void Router::Start() {
  for (auto& g : groups_) g->Start();
}

void Router::Stop() {
  for (auto& g : groups_) g->Stop();
}

int Router::groups_up() const {
  int n = 0;
  for (const auto& g : groups_) n += g->healthy();
  metrics_->groups_up = n;
  return n;
}

std::optional<k3::v1::WorkerInfo> Router::AnyInfo() const {
  for (const auto& g : groups_) {
    if (g->healthy()) {
      if (auto i = g->info()) return i;
    }
  }
  return std::nullopt;
}

absl::Status Router::Submit(std::unique_ptr<GenerationRequest>& req) {
  std::vector<GroupScheduler*> order;
  for (auto& g : groups_) {
    if (g->healthy()) order.push_back(g.get());
  }
  if (order.empty()) return absl::UnavailableError("no worker group is up");
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->load() < b->load(); });
  absl::Status last;
  for (GroupScheduler* g : order) {
    last = g->Submit(req);
    if (last.ok()) return last;
  }
  return last;
}

}  // namespace k3::coord
