#include "launch/launch_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace k3::launch {

bool ProfilingSpec::Profiles(const std::string& group, int rank) const {
  if (!enabled) return false;
  if (!groups.empty() && std::find(groups.begin(), groups.end(), group) == groups.end()) return false;
  return all_ranks || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

std::string BackendName(Backend b) { return b == Backend::kCuda ? "cuda" : "cpu"; }

std::string ToolName(ProfTool t) {
  switch (t) {
    case ProfTool::kNcu: return "ncu";
    case ProfTool::kNsys: return "nsys";
    case ProfTool::kComputeSanitizer: return "compute-sanitizer";
  }
  return "?";
}

std::string Where(const std::string& file, Loc loc) {
  if (loc.line <= 0) return absl::StrCat(file, " (--set): ");
  return absl::StrCat(file, ":", loc.line, ":", loc.column, ": ");
}

}  // namespace k3::launch
