#include "launch/plan_text.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace k3::launch {

std::string ShellQuote(std::string_view w) {
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::string_view("_./:=,@%+-").find(ch) != std::string_view::npos;
  });
  if (plain) return std::string(w);
  std::string q = "'";
  for (char ch : w) {
    if (ch == '\'') {
      q += "'\\''";
    } else {
      q += ch;
    }
  }
  return q + "'";
}

std::string ShellLine(const Command& c) {
  std::string s;
  for (const auto& [k, v] : c.env) absl::StrAppend(&s, k, "=", ShellQuote(v), " ");
  for (size_t i = 0; i < c.argv.size(); ++i) absl::StrAppend(&s, i ? " " : "", ShellQuote(c.argv[i]));
  if (!c.log.empty()) absl::StrAppend(&s, " > ", ShellQuote(c.log), " 2>&1");
  return s;
}

std::string DescribePlan(const LaunchPlan& p) {
  std::string s = absl::StrCat("# k3-launch plan for ", p.config_file, "\n# logs: ", p.log_dir, "\n# model: ", p.model, "\n");
  int step = 1;
  if (p.synth) {
    const bool header_only = std::find(p.synth->argv.begin(), p.synth->argv.end(), "--header-only") != p.synth->argv.end();
    absl::StrAppend(&s, "\n## ", step++,
                    header_only ? ". write the synthetic model's metadata for the coordinator (the ranks fill their weights "
                                  "from the seed); wait for it to end\n"
                                : ". generate the synthetic model (its file is absent); wait for it to end\n",
                    ShellLine(*p.synth), "\n");
  }
  for (const GroupLaunch& g : p.groups) {
    absl::StrAppend(&s, "\n## ", step++, ". worker group ", g.mpirun.name, " (", g.ranks, " ranks); wait for \"",
                    g.mpirun.ready, "\"; the coordinator dials ", g.dial, "\n# app file ", g.app_file, ":\n", g.app_text,
                    ShellLine(g.mpirun), "\n");
  }
  absl::StrAppend(&s, "\n## ", step++, ". coordinator; wait for \"", p.coordinator.ready, "\"; clients use ",
                  p.coordinator_dial, "\n", ShellLine(p.coordinator), "\n");
  return s;
}

}  // namespace k3::launch
