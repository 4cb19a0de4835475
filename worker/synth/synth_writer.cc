#include "worker/synth/synth_writer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_writer.h"

namespace k3::synth {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

int CountShards(const std::vector<uint64_t>& bytes, uint64_t alignment, uint64_t limit) {
  int shards = 1;
  uint64_t in_shard = 0, n_in_shard = 0;
  for (uint64_t b : bytes) {
    const uint64_t padded = AlignUp(b, alignment);
    if (n_in_shard > 0 && in_shard + padded > limit) {
      ++shards;
      in_shard = n_in_shard = 0;
    }
    in_shard += padded;
    ++n_in_shard;
  }
  return shards;
}

// One piece of the data stream: blocks of one tensor.
struct Chunk {
  size_t tensor;
  uint64_t first_block, n_blocks;
};

std::vector<Chunk> MakeChunks(const SynthModel& model, uint64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  const auto& ts = model.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const uint64_t per = std::max<uint64_t>(1, chunk_bytes / ts[i].block_bytes);
    for (uint64_t b = 0; b < ts[i].n_blocks; b += per) {
      chunks.push_back({i, b, std::min(per, ts[i].n_blocks - b)});
    }
  }
  return chunks;
}

// Generators fill ring slots ahead of the writer; slot k % ring holds chunk k.
class Pipeline {
 public:
  Pipeline(const SynthModel& model, std::vector<Chunk> chunks, int threads, uint64_t chunk_bytes)
      : model_(model), chunks_(std::move(chunks)), ring_(static_cast<size_t>(2 * threads + 2)) {
    for (Slot& s : ring_) s.bytes.resize(chunk_bytes);
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { Generate(); });
  }
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  size_t size() const { return chunks_.size(); }
  const Chunk& chunk(size_t k) const { return chunks_[k]; }

  // Waits for chunk k (in order) and returns its bytes; Release(k) hands the slot back.
  std::span<const uint8_t> Acquire(size_t k) {
    Slot& s = ring_[k % ring_.size()];
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return s.ready == static_cast<int64_t>(k); });
    const SynthTensor& t = model_.tensors()[chunks_[k].tensor];
    return {s.bytes.data(), chunks_[k].n_blocks * t.block_bytes};
  }
  void Release(size_t k) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_ = k + 1;
    }
    cv_.notify_all();
  }

 private:
  struct Slot {
    std::vector<uint8_t> bytes;
    int64_t ready = -1;  // the chunk the slot holds, once generated
  };

  void Generate() {
    for (;;) {
      const size_t k = next_.fetch_add(1);
      if (k >= chunks_.size()) return;
      Slot& s = ring_[k % ring_.size()];
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || written_ + ring_.size() > k; });  // slot free
        if (stop_) return;
      }
      const Chunk& c = chunks_[k];
      model_.FillBlocks(model_.tensors()[c.tensor], c.first_block, c.n_blocks, s.bytes.data());
      {
        std::lock_guard<std::mutex> lock(mu_);
        s.ready = static_cast<int64_t>(k);
      }
      cv_.notify_all();
    }
  }

  const SynthModel& model_;
  const std::vector<Chunk> chunks_;
  std::vector<Slot> ring_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t written_ = 0;
  bool stop_ = false;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> workers_;
};

}  // namespace

uint64_t ShardLimitFor(const std::vector<uint64_t>& tensor_bytes, uint64_t alignment, int shards) {
  uint64_t lo = 0, hi = 0;
  for (uint64_t b : tensor_bytes) {
    lo = std::max(lo, AlignUp(b, alignment));
    hi += AlignUp(b, alignment);
  }
  if (shards <= 1) return 0;  // no limit
  while (lo < hi) {           // fewest bytes per shard that still fits in `shards`
    const uint64_t mid = lo + (hi - lo) / 2;
    if (CountShards(tensor_bytes, alignment, mid) <= shards) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

absl::StatusOr<WriteReport> WriteModel(const SynthModel& model, const std::string& path, const WriteOptions& options,
                                       const ProgressFn& progress) {
  if (options.threads < 1 || options.chunk_bytes == 0 || options.shards < 1) {
    return absl::InvalidArgumentError("write options: threads, chunk_bytes and shards must be >= 1");
  }
  const auto t0 = Clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  gguf::GgufWriterOptions wo;
  wo.header_only = options.header_only;
  wo.max_shard_bytes = options.max_shard_bytes;
  if (wo.max_shard_bytes == 0 && options.shards > 1) {
    std::vector<uint64_t> bytes;
    for (const SynthTensor& t : model.tensors()) bytes.push_back(t.n_bytes());
    wo.max_shard_bytes = ShardLimitFor(bytes, 32, options.shards);  // the default alignment
  }
  gguf::GgufWriter w(path, wo);
  K3_RETURN_IF_ERROR(model.Declare(w));
  K3_RETURN_IF_ERROR(w.Begin());

  WriteReport report;
  for (const SynthTensor& t : model.tensors()) report.bytes_by_type[t.type] += t.n_bytes();
  WriteProgress p;
  p.total = options.header_only ? 0 : model.data_bytes();
  if (!options.header_only) {
    Pipeline pipe(model, MakeChunks(model, options.chunk_bytes), options.threads, options.chunk_bytes);
    auto last = Clock::now();
    for (size_t k = 0; k < pipe.size(); ++k) {
      const std::span<const uint8_t> bytes = pipe.Acquire(k);
      K3_RETURN_IF_ERROR(w.WriteTensorData(model.tensors()[pipe.chunk(k).tensor].spec.name, bytes));
      pipe.Release(k);
      p.done += bytes.size();
      if (progress && Clock::now() - last > std::chrono::milliseconds(250)) {
        last = Clock::now();
        p.seconds = seconds();
        progress(p);
      }
    }
  }
  K3_RETURN_IF_ERROR(w.Finish());
  report.paths = w.shard_paths();
  report.data_bytes = p.done;
  report.seconds = p.seconds = seconds();
  for (const std::string& f : report.paths) {
    std::error_code ec;  // e.g. /dev/null, for timing generation alone
    const uintmax_t n = std::filesystem::file_size(f, ec);
    if (!ec) report.file_bytes += n;
  }
  if (progress) progress(p);
  return report;
}

}  // namespace k3::synth
