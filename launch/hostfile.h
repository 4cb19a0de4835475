// Open MPI hostfiles: one host per line ("node07 slots=8 max_slots=8"), '#' comments. The
// launcher reads them to place ranks (rank r runs on host r / ranks_per_host) and check slots.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace k3::launch {

struct HostEntry {
  std::string name;
  int slots = 0;  // 0: not given
  int line = 0;   // 1-based line in the hostfile
};

// Parses hostfile text; `name` stands for the file in messages ("hosts.txt:3: ...").
absl::StatusOr<std::vector<HostEntry>> ParseHostfile(std::string_view text, const std::string& name);
absl::StatusOr<std::vector<HostEntry>> ReadHostfile(const std::string& path);

}  // namespace k3::launch
