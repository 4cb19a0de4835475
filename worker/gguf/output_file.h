// A file being written sequentially, with byte counting and alignment padding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace k3::gguf::internal {

class OutputFile {
 public:
  // Creates (or truncates) `path`.
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(const std::string& path);
  ~OutputFile();  // closes without reporting errors: call Close() to see them
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  absl::Status Write(std::span<const uint8_t> bytes);
  // Zero bytes up to the next multiple of `alignment` (a power of two).
  absl::Status PadTo(uint64_t alignment);
  absl::Status Close();
  uint64_t written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  OutputFile(std::string path, std::FILE* f) : path_(std::move(path)), f_(f) {}
  std::string path_;
  std::FILE* f_;
  uint64_t written_ = 0;
};

}  // namespace k3::gguf::internal
