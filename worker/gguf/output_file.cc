#include "worker/gguf/output_file.h"

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace k3::gguf::internal {

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot create"));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  return std::unique_ptr<OutputFile>(new OutputFile(path, f));
}

OutputFile::~OutputFile() {
  if (f_ != nullptr) std::fclose(f_);
}

absl::Status OutputFile::Write(std::span<const uint8_t> bytes) {
  if (f_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": already closed"));
  if (bytes.empty()) return absl::OkStatus();
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": write failed at byte ", written_));
  }
  written_ += bytes.size();
  return absl::OkStatus();
}

absl::Status OutputFile::PadTo(uint64_t alignment) {
  static constexpr uint8_t kZeros[4096] = {};
  uint64_t pad = (alignment - written_ % alignment) % alignment;
  while (pad > 0) {
    const uint64_t n = std::min<uint64_t>(pad, sizeof(kZeros));
    if (absl::Status s = Write({kZeros, n}); !s.ok()) return s;
    pad -= n;
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Close() {
  if (f_ == nullptr) return absl::OkStatus();
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": close failed"));
  return absl::OkStatus();
}

}  // namespace k3::gguf::internal
