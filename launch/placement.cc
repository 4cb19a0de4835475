#include "launch/placement.h"

#include "absl/strings/str_cat.h"

namespace k3::launch {
namespace {

// Index into a list given per local rank (ranks_per_host long) or per rank (ranks() long).
int ListIndex(const WorkerGroupSpec& g, size_t size, int rank) {
  return static_cast<int>(size) == g.ranks() ? rank : LocalRank(g, rank);
}

}  // namespace

int LocalRank(const WorkerGroupSpec& g, int rank) { return rank % g.ranks_per_host; }

const std::string& HostOf(const WorkerGroupSpec& g, int rank) { return g.hosts[rank / g.ranks_per_host]; }

int GpuOf(const WorkerGroupSpec& g, int rank) {
  if (g.gpus.empty()) return LocalRank(g, rank);
  return g.gpus[ListIndex(g, g.gpus.size(), rank)];
}

std::string GpuKey(const WorkerGroupSpec& g, int rank) {
  if (g.gpus.empty()) return "ranks_per_host";
  return absl::StrCat("gpus[", ListIndex(g, g.gpus.size(), rank), "]");
}

int NumaOf(const WorkerGroupSpec& g, int rank) {
  if (g.numa_nodes.empty()) return -1;
  return g.numa_nodes[ListIndex(g, g.numa_nodes.size(), rank)];
}

}  // namespace k3::launch
