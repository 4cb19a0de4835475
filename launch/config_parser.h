// Reads a launch config (YAML, via yaml-cpp) into LaunchConfig: every key known, every value of
// the right type, --set overrides applied first. Relative paths in the file (model, synthetic
// output, hostfile, log dir) are relative to the config file's own directory, so a config works
// from any working directory. Errors name the file, line and key, all reported together.
// Checks across keys (placement, addresses, the fit) are config_check.h's and model_fit.h's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/launch_config.h"
#include "launch/yaml_overrides.h"

namespace k3::launch {

absl::StatusOr<LaunchConfig> ReadLaunchConfig(const std::string& path, const std::vector<Override>& overrides = {});

// The same from text: `file` names it in messages, `base_dir` resolves relative paths.
absl::StatusOr<LaunchConfig> ParseLaunchConfig(std::string_view text, const std::string& file,
                                               const std::string& base_dir,
                                               const std::vector<Override>& overrides = {});

}  // namespace k3::launch
