#include "launch/launch_args.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace k3::launch {
namespace {

absl::StatusOr<std::chrono::milliseconds> ParseSeconds(const std::string& flag, const std::string& v, double min) {
  double s;
  if (!absl::SimpleAtod(v, &s) || s < min) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " wants seconds >= ", min, ", got '", v, "'"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

}  // namespace

absl::StatusOr<LaunchArgs> ParseLaunchArgs(const std::vector<std::string>& args) {
  LaunchArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    if (flag.rfind("--", 0) != 0) {
      if (!a.config.empty()) return absl::InvalidArgumentError(absl::StrCat("one config file only; also got '", flag, "'"));
      a.config = flag;
      continue;
    }
    if (flag == "--dry-run") { a.dry_run = true; continue; }
    if (flag == "--smoke-test") { a.run.smoke_test = true; continue; }
    if (flag == "--help" || flag == "-h") { a.help = true; continue; }
    std::string value;
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " wants a value"));
    }
    if (flag == "--set") {
      auto o = ParseOverride(value);
      if (!o.ok()) return o.status();
      a.overrides.push_back(*o);
    } else if (flag == "--log-dir") {
      a.overrides.push_back({"logging.dir", std::filesystem::absolute(value).lexically_normal().string()});
    } else if (flag == "--bin-dir") {
      a.bin_dir = std::filesystem::absolute(value).lexically_normal().string();
    } else if (flag == "--mpirun") {
      a.mpirun = value;
    } else if (flag == "--ready-timeout-s") {
      auto d = ParseSeconds(flag, value, 0.1);
      if (!d.ok()) return d.status();
      a.run.ready_timeout = *d;
    } else if (flag == "--grace-s") {
      auto d = ParseSeconds(flag, value, 0);
      if (!d.ok()) return d.status();
      a.run.grace = *d;
    } else if (flag == "--serve-for") {
      auto d = ParseSeconds(flag, value, 0.001);
      if (!d.ok()) return d.status();
      a.run.serve_for = *d;
    } else if (flag == "--smoke-ids") {
      a.run.smoke_ids = value;
    } else if (flag == "--smoke-tokens") {
      if (!absl::SimpleAtoi(value, &a.run.smoke_tokens) || a.run.smoke_tokens < 1) {
        return absl::InvalidArgumentError(absl::StrCat("--smoke-tokens wants an integer >= 1, got '", value, "'"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown option ", flag));
    }
  }
  if (a.config.empty() && !a.help) return absl::InvalidArgumentError("the config file is required");
  if (a.run.smoke_test && a.run.serve_for.count() > 0) {
    return absl::InvalidArgumentError("give --smoke-test or --serve-for, not both");
  }
  return a;
}

}  // namespace k3::launch
