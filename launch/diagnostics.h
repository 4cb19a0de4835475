// Errors found while reading or checking a launch config, each naming its place in the file.
// All of them are reported at once, so one run shows everything there is to fix; past
// kMaxErrors only their number is kept (a config can make errors quadratic in its size).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "launch/launch_config.h"

namespace k3::launch {

class Diagnostics {
 public:
  static constexpr size_t kMaxErrors = 50;

  explicit Diagnostics(std::string file) : file_(std::move(file)) {}

  // `key` is the dotted path of the value at fault ("worker_groups[0].gpus[1]").
  void Error(Loc loc, std::string_view key, std::string_view message);
  bool ok() const { return errors_.empty(); }
  const std::string& file() const { return file_; }
  // InvalidArgument with one error per line (OK when there is none).
  absl::Status ToStatus() const;

 private:
  std::string file_;
  std::vector<std::string> errors_;
  size_t dropped_ = 0;  // errors past kMaxErrors
};

}  // namespace k3::launch
