#include "launch/hostfile.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "worker/common/small_file.h"

namespace k3::launch {

absl::StatusOr<std::vector<HostEntry>> ParseHostfile(std::string_view text, const std::string& name) {
  std::vector<HostEntry> hosts;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> words = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    HostEntry h;
    h.name = std::string(words[0]);
    h.line = line_no;
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view w = words[i];
      // "slots=N" (also "cpu=N", Open MPI's synonym); max_slots and others are mpirun's business.
      if (absl::ConsumePrefix(&w, "slots=") || absl::ConsumePrefix(&w, "cpu=")) {
        if (!absl::SimpleAtoi(w, &h.slots) || h.slots < 1) {
          return absl::InvalidArgumentError(absl::StrCat(name, ":", line_no, ": slots wants an integer >= 1, got '",
                                                         std::string(words[i]), "'"));
        }
      }
    }
    for (const HostEntry& other : hosts) {
      if (other.name == h.name) {
        return absl::InvalidArgumentError(absl::StrCat(name, ":", line_no, ": host ", h.name, " is already on line ",
                                                       other.line));
      }
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": no hosts"));
  return hosts;
}

absl::StatusOr<std::vector<HostEntry>> ReadHostfile(const std::string& path) {
  // A regular file of at most 1 MiB: `hostfile: /dev/zero` must be an error, not a hang.
  auto text = ReadSmallFile(path, 1 << 20, "hostfile");
  if (!text.ok()) return text.status();
  return ParseHostfile(*text, path);
}

}  // namespace k3::launch
