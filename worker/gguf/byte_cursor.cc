#include "worker/gguf/byte_cursor.h"

#include "absl/strings/str_format.h"

namespace k3::gguf::internal {

absl::Status ByteCursor::Truncated(std::string_view what, uint64_t needed) const {
  return absl::InvalidArgumentError(
      absl::StrFormat("offset %d: %s needs %d bytes but only %d are left in the file "
                      "(truncated or corrupt)",
                      pos_, what, needed, remaining()));
}

absl::StatusOr<std::span<const uint8_t>> ByteCursor::ReadBytes(uint64_t n, std::string_view what) {
  if (remaining() < n) return Truncated(what, n);
  std::span<const uint8_t> out = bytes_.subspan(pos_, n);
  pos_ += n;
  return out;
}

absl::Status ByteCursor::Skip(uint64_t n, std::string_view what) {
  if (remaining() < n) return Truncated(what, n);
  pos_ += n;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ByteCursor::ReadString(std::string_view what, uint64_t max_len) {
  const uint64_t at = pos_;
  auto len = Read<uint64_t>(what);
  if (!len.ok()) return len.status();
  if (*len > max_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "offset %d: %s has length %d, over the limit of %d bytes", at, what, *len, max_len));
  }
  if (remaining() < *len) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %d: %s has length %d but only %d bytes are left in the file", at,
                        what, *len, remaining()));
  }
  std::string out(reinterpret_cast<const char*>(bytes_.data() + pos_), *len);
  pos_ += *len;
  return out;
}

}  // namespace k3::gguf::internal
