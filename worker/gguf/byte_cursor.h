// Bounds-checked little-endian reads over an in-memory file image. Every read checks the
// bytes left first, so a short or hostile file gives an error naming the offset, never a
// read past the end.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace k3::gguf::internal {

// Files are little-endian and values are copied byte for byte.
static_assert(std::endian::native == std::endian::little,
              "GGUF reader assumes a little-endian host");

class ByteCursor {
 public:
  explicit ByteCursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  uint64_t size() const { return bytes_.size(); }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // The next n bytes, as a view into the file image.
  absl::StatusOr<std::span<const uint8_t>> ReadBytes(uint64_t n, std::string_view what);
  absl::Status Skip(uint64_t n, std::string_view what);
  // A GGUF string: u64 length, then that many bytes. Refuses lengths over max_len.
  absl::StatusOr<std::string> ReadString(std::string_view what, uint64_t max_len);

  // "offset N: <what> needs K bytes, only M left".
  absl::Status Truncated(std::string_view what, uint64_t needed) const;

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

}  // namespace k3::gguf::internal
