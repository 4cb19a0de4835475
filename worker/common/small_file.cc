#include "worker/common/small_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"

namespace k3 {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat("cannot read ", what, " ", path, ": cannot open it"));
  // Read one byte past the limit rather than trust st_size (files in /proc report 0).
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", what, " ", path, ": read error"));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path, ": larger than ", max_bytes, " bytes"));
  }
  return text;
}

}  // namespace k3
