// Helpers shared by the k3_quant tests: golden files under K3_SHARED_DIR, random inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/quant/blocks.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/quant/half.h"

namespace k3::quant::testing {

inline std::string SharedPath(const std::string& rel) { return std::string(K3_SHARED_DIR) + "/" + rel; }

inline std::optional<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::vector<float> AsFloats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// One line of quant-vectors/manifest.txt.
struct ManifestEntry {
  std::string name;
  uint32_t type_id = 0;
  int64_t rows = 0, cols = 0, bytes = 0, block_elems = 0, block_bytes = 0;
};

inline std::optional<std::vector<ManifestEntry>> ReadManifest() {
  std::ifstream in(SharedPath("data/quant-vectors/manifest.txt"));
  if (!in) return std::nullopt;
  std::vector<ManifestEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    ManifestEntry e;
    if (!(ss >> e.name)) continue;
    std::string kv;
    while (ss >> kv) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (k == "type_id") e.type_id = static_cast<uint32_t>(std::stoul(v));
      if (k == "rows") e.rows = std::stoll(v);
      if (k == "cols") e.cols = std::stoll(v);
      if (k == "bytes") e.bytes = std::stoll(v);
      if (k == "block_elems") e.block_elems = std::stoll(v);
      if (k == "block_bytes") e.block_bytes = std::stoll(v);
    }
    out.push_back(e);
  }
  return out;
}

// The golden vectors of one manifest type: T.blocks, T.dequant.f32, T.source.f32.
struct Golden {
  ManifestEntry entry;
  GgmlType type;
  std::vector<uint8_t> blocks;
  std::vector<float> dequant;
  std::vector<float> source;
};

inline std::optional<Golden> ReadGolden(const ManifestEntry& e) {
  const std::string base = SharedPath("data/quant-vectors/" + e.name);
  auto blocks = ReadFile(base + ".blocks");
  auto dequant = ReadFile(base + ".dequant.f32");
  auto source = ReadFile(base + ".source.f32");
  auto traits = FindType(e.type_id);
  if (!blocks || !dequant || !source || !traits) return std::nullopt;
  return Golden{e, traits->type, std::move(*blocks), AsFloats(*dequant), AsFloats(*source)};
}

// Random bytes shaped into valid blocks of `type`: every fp16 scale field is overwritten with a
// finite value of moderate size (random bytes would give inf/NaN scales), plain float types get
// random normal values. Integer fields keep their random bits: every bit pattern is a valid code.
inline std::vector<uint8_t> RandomRow(GgmlType type, int64_t n, std::mt19937& rng) {
  const TypeTraits& t = Traits(type);
  const int64_t n_blocks = n / t.block_elems;
  std::vector<uint8_t> out(static_cast<size_t>(n_blocks * t.block_bytes));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      if (type == GgmlType::kF32) std::memcpy(&out[4 * i], &v, 4);
      const uint16_t h = type == GgmlType::kF16 ? F32ToF16(v) : F32ToBf16(v);
      if (type != GgmlType::kF32) std::memcpy(&out[2 * i], &h, 2);
    }
    return out;
  }
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(0.002f, 0.05f);
  auto scale = [&] {
    const float v = (rng() & 1) ? -mag(rng) : mag(rng);
    return F32ToF16(v);
  };
  std::vector<size_t> fp16_offsets;
  switch (type) {
    case GgmlType::kQ2_K: fp16_offsets = {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}; break;
    case GgmlType::kQ3_K: fp16_offsets = {offsetof(BlockQ3_K, d)}; break;
    case GgmlType::kQ4_K: fp16_offsets = {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}; break;
    case GgmlType::kQ5_K: fp16_offsets = {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}; break;
    case GgmlType::kQ6_K: fp16_offsets = {offsetof(BlockQ6_K, d)}; break;
    case GgmlType::kIQ1_M: break;  // its scale lives in nibbles, patched below
    default: fp16_offsets = {0}; break;  // every other block starts with its fp16 d
  }
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* block = &out[static_cast<size_t>(i * t.block_bytes)];
    for (size_t off : fp16_offsets) {
      const uint16_t h = scale();
      std::memcpy(block + off, &h, 2);
    }
    if (type == GgmlType::kIQ1_M) {
      // The fp16 super-scale is the top nibble of each of the four u16 in `scales`.
      const uint16_t h = scale();
      uint16_t sc[4];
      std::memcpy(sc, block + offsetof(BlockIQ1_M, scales), sizeof(sc));
      for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0fff) | (((h >> (4 * k)) & 0xf) << 12));
      std::memcpy(block + offsetof(BlockIQ1_M, scales), sc, sizeof(sc));
    }
  }
  return out;
}

inline std::vector<float> RandomFloats(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = normal(rng);
  return out;
}

}  // namespace k3::quant::testing
