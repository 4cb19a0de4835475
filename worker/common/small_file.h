// Reads a small text file the operator names (a config, a hostfile, a token, a PEM certificate)
// whole, refusing what is not one: a missing or unreadable path, a folder, a device or FIFO
// (/dev/zero, /dev/stdin would never end or block), or more than `max_bytes`.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace k3 {

// `what` names the file in messages ("hostfile", "token file").
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes, const std::string& what);

}  // namespace k3
