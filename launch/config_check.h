// Checks a parsed launch config for what no single key shows: the placement of ranks on hosts
// and GPUs (two ranks on one GPU of a host, more ranks than GPUs on a host, GPU indices out of
// range, hostfile slots), the parallel sizes, addresses and ports, values that cannot go into an
// mpirun app file (which splits lines at whitespace), flags the launcher sets itself, and the
// profiled ranks and tool. Every error names the line of the key at fault; all come together.
// The fit of the model on the GPUs is model_fit.h's.
#pragma once

#include "absl/status/status.h"
#include "launch/launch_config.h"

namespace k3::launch {

absl::Status CheckLaunchConfig(const LaunchConfig& config);

}  // namespace k3::launch
