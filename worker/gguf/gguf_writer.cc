#include "worker/gguf/gguf_writer.h"

#include <cstdio>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "worker/common/status_macros.h"
#include "worker/common/string_view_compat.h"
#include "worker/gguf/gguf_parser.h"
#include "worker/gguf/header_encoder.h"
#include "worker/gguf/output_file.h"
#include "worker/gguf/shard_name.h"
#include "worker/gguf/split_keys.h"
#include "worker/gguf/text_escape.h"

namespace k3::gguf {
namespace {

// ggml keeps tensor names in char[64] (GGML_MAX_NAME): longer names do not load there.
constexpr size_t kMaxTensorName = 63;
// split.count is a u16.
constexpr uint64_t kMaxShards = std::numeric_limits<uint16_t>::max();

bool IsSplitKey(std::string_view key) {
  return key == kSplitNoKey || key == kSplitCountKey || key == kSplitTensorsCountKey;
}

// A Value the encoder can write as it stands: known types, consistent sizes, no nesting.
absl::Status CheckWritable(std::string_view key, const Value& v) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrFormat("key %s: %s", QuoteForDisplay(key), why));
  };
  if (!IsKnownValueType(static_cast<uint32_t>(v.type)) ||
      !IsKnownValueType(static_cast<uint32_t>(v.elem_type))) {
    return bad("unknown value type");
  }
  if (v.elem_type == ValueType::kArray) return bad("arrays of arrays cannot be written");
  if (!v.is_array() && (v.type != v.elem_type || v.count != 1)) return bad("malformed scalar");
  if (v.elem_type == ValueType::kString) {
    if (v.strings.size() != v.count || !v.raw.empty()) return bad("malformed string value");
    for (const std::string& s : v.strings) {
      if (s.size() > internal::kMaxStringBytes) return bad("string longer than 1 GiB");
    }
  } else if (v.count > internal::kMaxArrayElements ||
             v.raw.size() != v.count * ValueTypeSize(v.elem_type) || !v.strings.empty()) {
    return bad("malformed value: byte size does not match the count");
  }
  if (v.count > internal::kMaxArrayElements) return bad("array longer than 2^30 elements");
  return absl::OkStatus();
}

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

struct GgufWriter::State {
  enum class Phase { kDeclaring, kWriting, kHeadersWritten, kFinished };

  std::string path;
  GgufWriterOptions options;
  std::vector<internal::KeyValue> kvs;  // order of first Set
  absl::flat_hash_map<std::string, size_t> key_index;
  uint32_t alignment = internal::kDefaultAlignment;
  std::vector<PlannedTensor> tensors;
  absl::flat_hash_map<std::string, size_t> tensor_index;
  std::vector<std::string> shard_paths;
  std::vector<std::vector<uint8_t>> headers;  // per shard, encoded at Begin

  Phase phase = Phase::kDeclaring;
  absl::Status error;  // sticky: once writing failed, every later call reports it
  std::unique_ptr<internal::OutputFile> out;
  int out_shard = -1;
  size_t current = 0;         // next tensor to receive data
  uint64_t current_done = 0;  // its bytes received so far
  std::vector<std::string> created;

  absl::Status Plan();
  void EncodeHeaders();
  absl::Status SwitchToShard(int shard);
  absl::Status SkipEmptyTensors();
  absl::Status Fail(absl::Status s) {
    error = s;
    return s;
  }
};

GgufWriter::GgufWriter(std::string path, GgufWriterOptions options)
    : s_(std::make_unique<State>()) {
  s_->path = std::move(path);
  s_->options = options;
}

GgufWriter::~GgufWriter() {
  if (s_->phase == State::Phase::kFinished) return;
  s_->out.reset();
  for (const std::string& p : s_->created) std::remove(p.c_str());
}

absl::Status GgufWriter::Set(std::string_view key, Value value) {
  if (s_->phase != State::Phase::kDeclaring) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: cannot set key %s after Begin()", s_->path, QuoteForDisplay(key)));
  }
  if (key.empty() || key.size() > internal::kMaxStringBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(s_->path, ": metadata keys must be 1 byte to 1 GiB"));
  }
  K3_RETURN_IF_ERROR(CheckWritable(key, value));
  if (key == internal::kAlignmentKey) {
    if (value.type != ValueType::kU32) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: key %s must be u32, not %s", s_->path, key, ValueTypeLabel(value)));
    }
    const uint32_t a = value.Element<uint32_t>(0);
    if (a == 0 || (a & (a - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s = %d is not a power of two", s_->path, key, a));
    }
    s_->alignment = a;
  }
  const auto [it, inserted] = s_->key_index.emplace(std::string(key), s_->kvs.size());
  if (inserted) {
    s_->kvs.push_back({std::string(key), std::move(value)});
  } else {
    s_->kvs[it->second].value = std::move(value);
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string_view name, const std::vector<int64_t>& ne,
                                   quant::GgmlType type) {
  const std::string q = QuoteForDisplay(name);
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: tensor %s: %s", s_->path, q, why));
  };
  if (s_->phase != State::Phase::kDeclaring) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: cannot add tensor %s after Begin()", s_->path, q));
  }
  if (name.empty() || name.size() > kMaxTensorName) {
    return bad(absl::StrFormat("names must be 1 to %d bytes (ggml's limit)", kMaxTensorName));
  }
  if (ne.empty() || ne.size() > internal::kMaxDims) {
    return bad(absl::StrFormat("%d dimensions (must be 1 to %d)", ne.size(), internal::kMaxDims));
  }
  const std::optional<quant::TypeTraits> traits = quant::FindType(static_cast<uint32_t>(type));
  if (!traits) return bad(absl::StrFormat("unknown ggml type id %d", static_cast<uint32_t>(type)));
  uint64_t n_elems = 1;
  for (int64_t d : ne) {
    if (d < 0) return bad("negative dimension");
    if (__builtin_mul_overflow(n_elems, static_cast<uint64_t>(d), &n_elems) ||
        n_elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad("element count overflows");
    }
  }
  if (ne[0] % traits->block_elems != 0) {
    return bad(absl::StrFormat("ne[0] = %d is not a multiple of %s's block size %d", ne[0],
                               traits->name, traits->block_elems));
  }
  const std::optional<uint64_t> n_bytes = quant::BytesFor(type, n_elems);
  if (!n_bytes) return bad("byte count overflows");
  const auto [it, inserted] = s_->tensor_index.emplace(std::string(name), s_->tensors.size());
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrFormat("%s: tensor %s declared twice", s_->path, q));
  }
  s_->tensors.push_back(PlannedTensor{std::string(name), ne, type, *n_bytes, 0, 0});
  return absl::OkStatus();
}

// Assigns shards and offsets, as gguf-split does: a new shard when the tensor limit is
// reached or the next tensor's padded data would pass the byte limit.
absl::Status GgufWriter::State::Plan() {
  int shard = 0;
  uint64_t shard_bytes = 0;
  uint64_t shard_tensors = 0;
  for (PlannedTensor& t : tensors) {
    const uint64_t padded = AlignUp(t.n_bytes, alignment);
    if (padded < t.n_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: tensor %s is too large", path, QuoteForDisplay(t.name)));
    }
    uint64_t next = 0;
    const bool overflows = __builtin_add_overflow(shard_bytes, padded, &next);
    const bool full_count =
        options.max_shard_tensors > 0 && shard_tensors >= options.max_shard_tensors;
    const bool full_bytes = options.max_shard_bytes > 0 && next > options.max_shard_bytes;
    if (shard_tensors > 0 && (full_count || full_bytes || overflows)) {
      ++shard;
      shard_bytes = 0;
      shard_tensors = 0;
    }
    t.shard = shard;
    t.offset = shard_bytes;
    shard_bytes += padded;
    ++shard_tensors;
  }
  const uint64_t n_shards = static_cast<uint64_t>(shard) + 1;
  if (n_shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the limits make %d shards; split.count allows at most %d", path,
                        n_shards, kMaxShards));
  }
  if (n_shards > 1 && tensors.size() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": too many tensors for split.tensors.count"));
  }
  shard_paths.clear();
  if (n_shards == 1) {
    shard_paths.push_back(path);
  } else {
    std::string_view prefix = path;
    if (prefix.size() > 5 && prefix.substr(prefix.size() - 5) == ".gguf") prefix.remove_suffix(5);
    for (uint64_t i = 1; i <= n_shards; ++i) {
      shard_paths.push_back(ShardPath(prefix, static_cast<int>(i), static_cast<int>(n_shards)));
    }
  }
  return absl::OkStatus();
}

// Shard 1 carries all metadata; every shard of a split output carries the split.* keys
// (after the rest, as gguf-split writes them) and, when it is not the default, the alignment.
void GgufWriter::State::EncodeHeaders() {
  const int n = static_cast<int>(shard_paths.size());
  std::vector<std::vector<const PlannedTensor*>> per_shard(n);
  for (const PlannedTensor& t : tensors) per_shard[t.shard].push_back(&t);
  headers.clear();
  for (int k = 0; k < n; ++k) {
    std::vector<internal::KeyValue> shard_kvs;
    for (const internal::KeyValue& kv : kvs) {
      if (IsSplitKey(kv.key)) continue;
      if (k == 0 ||
          (kv.key == internal::kAlignmentKey && alignment != internal::kDefaultAlignment)) {
        shard_kvs.push_back(kv);
      }
    }
    if (n > 1) {
      shard_kvs.push_back({std::string(kSplitNoKey), MakeScalar<uint16_t>(k)});
      shard_kvs.push_back({std::string(kSplitCountKey), MakeScalar<uint16_t>(n)});
      shard_kvs.push_back({std::string(kSplitTensorsCountKey),
                           MakeScalar<int32_t>(static_cast<int32_t>(tensors.size()))});
    }
    headers.push_back(internal::EncodeHeader(shard_kvs, per_shard[k], alignment));
  }
}

absl::Status GgufWriter::Begin() {
  State& s = *s_;
  if (s.phase != State::Phase::kDeclaring) {
    return absl::FailedPreconditionError(absl::StrCat(s.path, ": Begin() called twice"));
  }
  K3_RETURN_IF_ERROR(s.Plan());
  s.EncodeHeaders();
  if (s.options.header_only) {
    for (size_t k = 0; k < s.shard_paths.size(); ++k) {
      absl::StatusOr<std::unique_ptr<internal::OutputFile>> f =
          internal::OutputFile::Create(s.shard_paths[k]);
      if (!f.ok()) return s.Fail(f.status());
      s.created.push_back(s.shard_paths[k]);
      if (absl::Status st = (*f)->Write(s.headers[k]); !st.ok()) return s.Fail(st);
      if (absl::Status st = (*f)->Close(); !st.ok()) return s.Fail(st);
    }
    s.phase = State::Phase::kHeadersWritten;
    return absl::OkStatus();
  }
  s.phase = State::Phase::kWriting;
  K3_RETURN_IF_ERROR(s.SwitchToShard(0));
  return s.SkipEmptyTensors();
}

// Closes the open shard and opens the following ones up to `shard`, writing their headers
// (a shard may hold only empty tensors, so each one is opened in turn).
absl::Status GgufWriter::State::SwitchToShard(int shard) {
  while (out_shard < shard) {
    if (out != nullptr) {
      if (absl::Status st = out->Close(); !st.ok()) return Fail(st);
      spdlog::debug("gguf: wrote {}", shard_paths[out_shard]);
    }
    ++out_shard;
    absl::StatusOr<std::unique_ptr<internal::OutputFile>> f =
        internal::OutputFile::Create(shard_paths[out_shard]);
    if (!f.ok()) return Fail(f.status());
    out = *std::move(f);
    created.push_back(shard_paths[out_shard]);
    if (absl::Status st = out->Write(headers[out_shard]); !st.ok()) return Fail(st);
  }
  return absl::OkStatus();
}

// Moves past tensors that are complete without data, and into the next tensor's shard.
absl::Status GgufWriter::State::SkipEmptyTensors() {
  while (current < tensors.size() && tensors[current].n_bytes == 0) ++current;
  if (current < tensors.size()) return SwitchToShard(tensors[current].shard);
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteTensorData(std::string_view name, std::span<const uint8_t> bytes) {
  State& s = *s_;
  if (!s.error.ok()) return s.error;
  if (s.phase != State::Phase::kWriting) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: tensor data can be written only between Begin() and Finish()%s",
                        s.path, s.options.header_only ? " (this writer is header-only)" : ""));
  }
  const auto it = s.tensor_index.find(AsAbsl(name));
  if (it == s.tensor_index.end()) {
    return absl::NotFoundError(
        absl::StrFormat("%s: no tensor %s was declared", s.path, QuoteForDisplay(name)));
  }
  const size_t idx = it->second;
  if (idx < s.current) {
    if (bytes.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: tensor %s already has all its %d bytes", s.path, QuoteForDisplay(name),
                        s.tensors[idx].n_bytes));
  }
  if (idx > s.current) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: tensor data must come in declaration order: expected %s (tensor %d), got %s "
        "(tensor %d)",
        s.path, QuoteForDisplay(s.tensors[s.current].name), s.current, QuoteForDisplay(name), idx));
  }
  const PlannedTensor& t = s.tensors[idx];
  if (bytes.size() > t.n_bytes - s.current_done) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: tensor %s is %d bytes; %d were written and %d more do not fit", s.path,
                        QuoteForDisplay(name), t.n_bytes, s.current_done, bytes.size()));
  }
  if (absl::Status st = s.out->Write(bytes); !st.ok()) return s.Fail(st);
  s.current_done += bytes.size();
  if (s.current_done < t.n_bytes) return absl::OkStatus();
  if (absl::Status st = s.out->PadTo(s.alignment); !st.ok()) return s.Fail(st);
  ++s.current;
  s.current_done = 0;
  return s.SkipEmptyTensors();
}

absl::Status GgufWriter::WriteTensors(const TensorSource& source) {
  State& s = *s_;
  if (s.phase == State::Phase::kDeclaring) K3_RETURN_IF_ERROR(Begin());
  for (size_t i = s.current; i < s.tensors.size(); ++i) {
    const PlannedTensor& t = s.tensors[i];
    const ChunkSink sink = [this, &t](std::span<const uint8_t> chunk) {
      return WriteTensorData(t.name, chunk);
    };
    K3_RETURN_IF_ERROR(source(t, sink));
    if (s.current <= i) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: the source gave tensor %s %d of its %d bytes", s.path,
                          QuoteForDisplay(t.name), s.current_done, t.n_bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::Finish() {
  State& s = *s_;
  if (s.phase == State::Phase::kDeclaring) K3_RETURN_IF_ERROR(Begin());
  if (!s.error.ok()) return s.error;
  if (s.phase == State::Phase::kFinished) return absl::OkStatus();
  if (s.phase == State::Phase::kWriting) {
    if (s.current < s.tensors.size()) {
      const PlannedTensor& t = s.tensors[s.current];
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: tensor %s got %d of its %d bytes (%d tensors incomplete)", s.path,
          QuoteForDisplay(t.name), s.current_done, t.n_bytes, s.tensors.size() - s.current));
    }
    K3_RETURN_IF_ERROR(s.SwitchToShard(static_cast<int>(s.shard_paths.size()) - 1));
    if (absl::Status st = s.out->Close(); !st.ok()) return s.Fail(st);
  }
  s.phase = State::Phase::kFinished;
  spdlog::debug("gguf: finished {} ({} shard(s), {} tensors)", s.path, s.shard_paths.size(),
                s.tensors.size());
  return absl::OkStatus();
}

const std::vector<std::string>& GgufWriter::shard_paths() const { return s_->shard_paths; }
std::span<const PlannedTensor> GgufWriter::tensors() const { return s_->tensors; }

}  // namespace k3::gguf
