// Follows a child's log file for a line such as "LEADER READY": each look reads only what was
// added since the last, so the children's output never has to pass through the launcher (a
// slow reader would stall them).
#pragma once

#include <cstdint>
#include <string>

namespace k3::launch {

class LogWatch {
 public:
  LogWatch(std::string path, std::string needle) : path_(std::move(path)), needle_(std::move(needle)) {}

  // True once a complete line containing the needle has been written.
  bool Seen();
  const std::string& line() const { return line_; }  // that line

 private:
  std::string path_, needle_, partial_, line_;
  uint64_t offset_ = 0;
  bool seen_ = false;
};

// The last `lines` lines of a file (for messages about a process that failed).
std::string TailOfFile(const std::string& path, int lines);

}  // namespace k3::launch
