// Where each rank of a worker group runs: rank r on host r / ranks_per_host (the order mpirun
// gives ranks to the app file's lines), on a GPU and NUMA node from the per-rank lists.
#pragma once

#include <string>

#include "launch/launch_config.h"

namespace k3::launch {

int LocalRank(const WorkerGroupSpec& g, int rank);
const std::string& HostOf(const WorkerGroupSpec& g, int rank);
// The GPU of `rank` (cuda): gpus per local rank or per rank; by default the local rank.
int GpuOf(const WorkerGroupSpec& g, int rank);
// The key whose value gave GpuOf ("gpus[3]", or "ranks_per_host" for the default).
std::string GpuKey(const WorkerGroupSpec& g, int rank);
// The NUMA node of `rank`, -1 when numa_nodes is not given.
int NumaOf(const WorkerGroupSpec& g, int rank);

}  // namespace k3::launch
