// Helpers for the GGUF tests: temp dirs, whole-file I/O, a raw byte builder for hand-made
// (and deliberately broken) files, and a small valid file written by GgufWriter.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gguf/gguf_writer.h"
#include "tests/common/temp_files.h"

namespace k3::gguf::testing {

// Temporary directories (named k3-gguf-test-XXXXXX), whole-file reads, status messages: tests/common.
class TempDir : public k3::testing::TempDir {
 public:
  TempDir() : k3::testing::TempDir("k3-gguf-test") {}
};
using k3::testing::Msg;
using k3::testing::ReadAll;

inline void WriteAll(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Little-endian bytes, appended in file order.
class RawGguf {
 public:
  template <typename T>
  RawGguf& Put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    return *this;
  }
  RawGguf& U32(uint32_t v) { return Put(v); }
  RawGguf& U64(uint64_t v) { return Put(v); }
  RawGguf& I64(int64_t v) { return Put(v); }
  RawGguf& Str(std::string_view s) {
    U64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  // magic, version, n_tensors, n_kv
  RawGguf& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return U32(0x46554747).U32(version).U64(n_tensors).U64(n_kv);
  }
  RawGguf& KvU32(std::string_view key, uint32_t v) { return Str(key).U32(4).U32(v); }
  RawGguf& Tensor(std::string_view name, const std::vector<int64_t>& ne, uint32_t type,
                  uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) I64(d);
    return U32(type).U64(offset);
  }
  RawGguf& PadTo(size_t alignment) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  RawGguf& Zeros(size_t n) {
    bytes.resize(bytes.size() + n, 0);
    return *this;
  }
  std::vector<uint8_t> bytes;
};

// Deterministic tensor bytes: byte i of tensor `seed` is (i * 31 + seed * 7) mod 251.
inline std::vector<uint8_t> Pattern(uint64_t n, int seed) {
  std::vector<uint8_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i * 31 + seed * 7) % 251);
  return out;
}

// Writes every declared tensor with Pattern(n_bytes, index) in one chunk each.
inline absl::Status WritePatterns(GgufWriter& w) {
  const std::span<const PlannedTensor> ts = w.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::vector<uint8_t> data = Pattern(ts[i].n_bytes, static_cast<int>(i));
    if (absl::Status s = w.WriteTensorData(ts[i].name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// A small valid file: a few keys of different types and three tensors (F32, Q8_0, IQ1_S).
inline absl::Status WriteSmallFile(const std::string& path, GgufWriterOptions options = {}) {
  GgufWriter w(path, options);
  for (absl::Status s : {
           w.SetString("general.architecture", "kimi-k3"),
           w.SetU32("kimi-k3.block_count", 2),
           w.SetF32("kimi-k3.attention.layer_norm_rms_epsilon", 1e-5f),
           w.SetArray("kimi-k3.attention.head_count_kv", std::vector<int32_t>{0, 1}),
           w.SetArray("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "<s>"}),
           w.AddTensor("output_norm.weight", {8}, quant::GgmlType::kF32),
           w.AddTensor("token_embd.weight", {32, 2}, quant::GgmlType::kQ8_0),
           w.AddTensor("blk.0.ffn_gate_exps.weight", {256, 1, 2}, quant::GgmlType::kIQ1_S),
           w.Begin(),
       }) {
    if (!s.ok()) return s;
  }
  if (!options.header_only) {
    if (absl::Status s = WritePatterns(w); !s.ok()) return s;
  }
  return w.Finish();
}

inline std::vector<uint8_t> SmallFileBytes() {
  TempDir dir;
  const std::string path = dir.File("small.gguf");
  EXPECT_TRUE(WriteSmallFile(path).ok());
  return ReadAll(path);
}

}  // namespace k3::gguf::testing
