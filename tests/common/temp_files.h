// Test helpers for files: a temporary directory removed at scope exit, whole-file reads, and a
// status message as std::string (Debian's absl::string_view does not work with gmock matchers).
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"

namespace k3::testing {

// A fresh directory under the system's temp path (named prefix-XXXXXX), removed with its contents
// at scope exit.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "k3-test") {
    std::string templ = (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string File(std::string_view name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

inline std::string Msg(const absl::Status& s) { return std::string(s.message()); }

inline std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace k3::testing
