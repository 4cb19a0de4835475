// Helpers of the launch tests: parse YAML text as "t.yaml" in /cfg, and check that an error
// names a line.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "launch/config_check.h"
#include "launch/config_parser.h"

namespace k3::launch::testing {

inline absl::StatusOr<LaunchConfig> Parse(const std::string& yaml, const std::vector<Override>& overrides = {}) {
  return ParseLaunchConfig(yaml, "t.yaml", "/cfg", overrides);
}

// Parse, then the cross-key checks.
inline absl::Status ParseAndCheck(const std::string& yaml) {
  auto c = Parse(yaml);
  if (!c.ok()) return c.status();
  return CheckLaunchConfig(*c);
}

// Some line of the error starts with "t.yaml:LINE:" and contains every fragment.
inline ::testing::AssertionResult HasError(const absl::Status& s, int line, const std::vector<std::string>& fragments) {
  if (s.ok()) return ::testing::AssertionFailure() << "no error; wanted one on line " << line;
  const std::string prefix = line > 0 ? absl::StrCat("t.yaml:", line, ":") : "t.yaml (--set): ";
  for (absl::string_view l : absl::StrSplit(s.message(), '\n')) {
    if (!absl::StartsWith(l, prefix)) continue;
    bool all = true;
    for (const std::string& f : fragments) all = all && absl::StrContains(l, f);
    if (all) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error on line " << line << " with those words in:\n" << s.message();
}

inline ::testing::AssertionResult HasError(const absl::StatusOr<LaunchConfig>& c, int line,
                                           const std::vector<std::string>& fragments) {
  return HasError(c.status(), line, fragments);
}

// A valid one-group cuda config; lines numbered for the tests that change one of them.
inline constexpr char kValid[] = R"(model:
  path: /models/k3.gguf
worker_groups:
  - name: g0
    backend: cuda
    hosts: [node1]
    ranks_per_host: 2
    gpus_per_host: 8
    gpus: [0, 1]
    listen: 0.0.0.0:50061
coordinator:
  listen: 127.0.0.1:50051
)";

}  // namespace k3::launch::testing
