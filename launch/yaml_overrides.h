// --set KEY=VALUE: changes one scalar of the YAML tree before it is read, e.g. the ports a test
// picks: "coordinator.listen=127.0.0.1:41234", "worker_groups.0.listen=..." (a list element by
// index, or by its name: "worker_groups.cpu0.listen=..."). Missing map keys are created.
// Values set this way carry no line; errors about them say "(--set)".
#pragma once

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace k3::launch {

struct Override {
  std::string key;  // dotted path
  std::string value;
};

absl::StatusOr<Override> ParseOverride(std::string_view arg);
absl::Status ApplyOverride(YAML::Node root, const Override& o);

}  // namespace k3::launch
