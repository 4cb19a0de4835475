// Streaming GGUF (version 3) writer: the header goes out first, then each tensor's bytes in
// declaration order, in chunks of any size, so files far larger than memory can be written
// with a small buffer. Optionally splits the output into NAME-0000i-of-0000N.gguf shards the
// way llama.cpp's gguf-split does, or writes headers only (for planning tools).
//
//   GgufWriter w("out.gguf");
//   K3_RETURN_IF_ERROR(w.SetString("general.architecture", "kimi-k3"));
//   K3_RETURN_IF_ERROR(w.AddTensor("x.weight", {4096, 512}, quant::GgmlType::kQ8_0));
//   K3_RETURN_IF_ERROR(w.Begin());                      // writes the (first) header
//   K3_RETURN_IF_ERROR(w.WriteTensorData("x.weight", chunk1));  // ... as many chunks as needed
//   K3_RETURN_IF_ERROR(w.Finish());                     // checks every tensor got its bytes
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kernels/quant/ggml_type.h"
#include "worker/gguf/gguf_value.h"

namespace k3::gguf {

struct GgufWriterOptions {
  // Start a new shard when the next tensor's data (padded) would take this shard's data past
  // this many bytes; a tensor larger than the limit gets a shard of its own. 0: no limit.
  uint64_t max_shard_bytes = 0;
  // At most this many tensors per shard. 0: no limit.
  uint64_t max_shard_tensors = 0;
  // Write each shard's header and tensor table (padded to the alignment), no tensor data.
  bool header_only = false;
};

// A declared tensor and where it goes.
struct PlannedTensor {
  std::string name;
  std::vector<int64_t> ne;
  quant::GgmlType type;
  uint64_t n_bytes = 0;
  int shard = 0;        // index into shard_paths()
  uint64_t offset = 0;  // relative to its shard's data section, as the tensor table says
};

class GgufWriter {
 public:
  // `path` is the output for a single file. When the options make several shards, the
  // outputs are PREFIX-0000i-of-0000N.gguf, PREFIX being `path` without ".gguf".
  explicit GgufWriter(std::string path, GgufWriterOptions options = {});
  // A writer dropped before a successful Finish() removes the files it started.
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // ---- metadata (before Begin) ----
  // Setting a key again replaces its value and keeps its place. general.alignment must be
  // a u32 power of two; it sets the alignment (default 32). split.* keys are the writer's:
  // any set here are dropped, and a multi-shard output gets its own.
  absl::Status Set(std::string_view key, Value value);
  absl::Status SetU8(std::string_view key, uint8_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetI8(std::string_view key, int8_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetU16(std::string_view key, uint16_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetI16(std::string_view key, int16_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetU32(std::string_view key, uint32_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetI32(std::string_view key, int32_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetU64(std::string_view key, uint64_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetI64(std::string_view key, int64_t v) { return Set(key, MakeScalar(v)); }
  absl::Status SetF32(std::string_view key, float v) { return Set(key, MakeScalar(v)); }
  absl::Status SetF64(std::string_view key, double v) { return Set(key, MakeScalar(v)); }
  absl::Status SetBool(std::string_view key, bool v) { return Set(key, MakeScalar(v)); }
  absl::Status SetString(std::string_view key, std::string_view v) {
    return Set(key, MakeString(v));
  }
  // Arrays of u8..f64 (the element type follows T), bool and string.
  template <typename T>
  absl::Status SetArray(std::string_view key, const std::vector<T>& v) {
    return Set(key, MakeArray(v));
  }
  absl::Status SetArray(std::string_view key, const std::vector<std::string>& v) {
    return Set(key, MakeStringArray(v));
  }

  // ---- tensors (before Begin) ----
  // ne[0] is the contiguous dimension and must be a multiple of the type's block size.
  absl::Status AddTensor(std::string_view name, const std::vector<int64_t>& ne,
                         quant::GgmlType type);

  // Plans the shards, then writes the first header (header_only: every header). After it,
  // shard_paths() and tensors() describe the output.
  absl::Status Begin();

  // ---- data (after Begin), in declaration order ----
  // The next bytes of tensor `name`: chunks of any size, but a tensor's chunks must add up
  // to exactly its size and tensors must come in declaration order.
  absl::Status WriteTensorData(std::string_view name, std::span<const uint8_t> bytes);
  // Pulls the data instead: for each tensor still to write, calls source(tensor, sink),
  // and source passes the tensor's bytes to sink in chunks.
  using ChunkSink = std::function<absl::Status(std::span<const uint8_t>)>;
  using TensorSource = std::function<absl::Status(const PlannedTensor&, const ChunkSink&)>;
  absl::Status WriteTensors(const TensorSource& source);

  // Checks that every tensor got all its bytes and closes the output (calls Begin first if
  // it was not called).
  absl::Status Finish();

  const std::vector<std::string>& shard_paths() const;
  std::span<const PlannedTensor> tensors() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace k3::gguf
