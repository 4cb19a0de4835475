// Writes a SynthModel as GGUF, streaming: worker threads generate fixed-size chunks into a
// small ring of buffers while this thread writes them in file order, so memory stays at
// (threads + a few) chunks whatever the model's size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant/ggml_type.h"
#include "worker/synth/synth_model.h"

namespace k3::synth {

struct WriteOptions {
  int threads = 2;                  // generator threads (the calling thread writes)
  uint64_t chunk_bytes = 8ull << 20;
  bool header_only = false;         // headers and tensor tables only, for planning tools
  int shards = 1;                   // split into this many shards (greedy, gguf-split style) ...
  uint64_t max_shard_bytes = 0;     // ... or by this limit when > 0
};

struct WriteProgress {
  uint64_t done = 0;   // tensor bytes written
  uint64_t total = 0;  // tensor bytes to write
  double seconds = 0;
};

struct WriteReport {
  std::vector<std::string> paths;
  uint64_t data_bytes = 0;   // tensor bytes (0 written when header-only)
  uint64_t file_bytes = 0;   // what the files take on disk
  double seconds = 0;
  std::map<quant::GgmlType, uint64_t> bytes_by_type;
};

using ProgressFn = std::function<void(const WriteProgress&)>;

// Writes `model` to `path` (shards: PREFIX-0000i-of-0000N.gguf). `progress` is called from
// this thread a few times a second and once at the end.
absl::StatusOr<WriteReport> WriteModel(const SynthModel& model, const std::string& path, const WriteOptions& options,
                                       const ProgressFn& progress = {});

// The smallest shard byte limit for which the writer's greedy split (a new shard when the
// next tensor's padded bytes would pass the limit) makes at most `shards` shards.
uint64_t ShardLimitFor(const std::vector<uint64_t>& tensor_bytes, uint64_t alignment, int shards);

}  // namespace k3::synth
