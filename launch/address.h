// host:port addresses of the leaders and the coordinator: parsing, what the coordinator dials,
// and which host an address lives on (to catch two servers on one port of one machine).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "launch/launch_config.h"

namespace k3::launch {

struct HostPort {
  std::string host;  // as written, brackets of [v6] removed
  int port = 0;
};

// "host:port", "[::1]:port"; the port in 1..65535.
absl::StatusOr<HostPort> ParseHostPort(std::string_view address);

bool IsWildcardHost(std::string_view host);  // 0.0.0.0, ::, *, empty
bool IsLocalHost(std::string_view host);     // localhost, 127.x, ::1

// What the coordinator dials for group `g`: `address` if given, else `listen` with a wildcard
// host replaced by the host of rank 0 (the leader).
std::string DialAddress(const WorkerGroupSpec& g);

}  // namespace k3::launch
