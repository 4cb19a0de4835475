// Requests to worker groups: the least-loaded healthy group takes each request; a failed group
// is skipped until its health check passes again.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coordinator/server/group_scheduler.h"

namespace k3::coord {

class Router {
 public:
  Router(const std::vector<std::string>& addresses, const tok::Tokenizer* tokenizer, SchedulerOptions options,
         Metrics* metrics);
  ~Router();
  void Start();
  void Stop();

  // UNAVAILABLE when no group is up, RESOURCE_EXHAUSTED when every healthy group is full.
  absl::Status Submit(std::unique_ptr<GenerationRequest>& req);
  int groups_up() const;
  const std::vector<std::unique_ptr<GroupScheduler>>& groups() const { return groups_; }
  // Any healthy group's worker info (model, capacity).
  std::optional<k3::v1::WorkerInfo> AnyInfo() const;

 private:
  std::vector<std::unique_ptr<GroupScheduler>> groups_;
  Metrics* metrics_;
};

}  // namespace k3::coord
