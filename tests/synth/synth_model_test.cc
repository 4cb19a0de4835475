// Generated files: the presets parse and validate, a rank's in-memory fill (rows, column bands)
// is the file's bytes, the bytes depend only on the seed (not on threads, chunking or shards).
#include "worker/synth/synth_model.h"

#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "tests/synth/synth_test_util.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/k3_config.h"
#include "worker/model/tensor_manifest.h"

namespace k3::synth {
namespace {

using testing::Msg;
using testing::PresetModel;
using testing::TempDir;
using testing::WriteTo;

// Opens `path`, parses and validates it; returns the file.
std::unique_ptr<gguf::GgufFile> OpenValid(const std::string& path, model::K3Config* config,
                                          bool header_only = false) {
  auto f = gguf::GgufFile::Open(path, header_only);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return nullptr;
  auto c = model::ParseK3Config(**f);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  const absl::Status v = model::ValidateManifest(*c, **f);
  EXPECT_TRUE(v.ok()) << Msg(v);
  *config = *c;
  return std::move(*f);
}

void ExpectSameShapes(const model::K3Config& a, const model::K3Config& b) {
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.layer_kinds, b.layer_kinds);
  EXPECT_EQ(a.res_block_size, b.res_block_size);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_nope_dim, b.qk_nope_dim);
  EXPECT_EQ(a.qk_rope_dim, b.qk_rope_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.mla_row, b.mla_row);
  EXPECT_EQ(a.kda_head_dim, b.kda_head_dim);
  EXPECT_EQ(a.conv_kernel, b.conv_kernel);
  EXPECT_EQ(a.has_gate_lower_bound, b.has_gate_lower_bound);
  EXPECT_EQ(a.gate_lower_bound, b.gate_lower_bound);
  EXPECT_EQ(a.n_dense_layers, b.n_dense_layers);
  EXPECT_EQ(a.dense_ffn, b.dense_ffn);
  EXPECT_EQ(a.n_experts, b.n_experts);
  EXPECT_EQ(a.n_experts_used, b.n_experts_used);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.expert_ffn, b.expert_ffn);
  EXPECT_EQ(a.expert_latent, b.expert_latent);
  EXPECT_EQ(a.gating, b.gating);
  EXPECT_EQ(a.expert_weights_norm, b.expert_weights_norm);
  EXPECT_EQ(a.expert_weights_scale, b.expert_weights_scale);
  EXPECT_EQ(a.situ_beta, b.situ_beta);
  EXPECT_EQ(a.situ_linear_beta, b.situ_linear_beta);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
}

// Every tensor of the file equals the model's own fill: whole, by random row ranges (a rank's
// row band), and by column bands of 2-D weights (a rank's share of a row-parallel weight).
void ExpectFileIsTheFill(const SynthModel& m, const gguf::GgufFile& f) {
  std::mt19937_64 rng(3);
  for (const SynthTensor& t : m.tensors()) {
    const gguf::TensorInfo* info = f.FindTensor(t.spec.name);
    ASSERT_NE(info, nullptr) << t.spec.name;
    ASSERT_EQ(info->type, t.type) << t.spec.name;
    ASSERT_EQ(info->n_bytes, t.n_bytes()) << t.spec.name;
    std::vector<uint8_t> buf(t.n_bytes());
    m.FillBlocks(t, 0, t.n_blocks, buf.data());
    ASSERT_EQ(std::memcmp(buf.data(), info->data, buf.size()), 0) << t.spec.name;
    const int64_t rows = t.n_rows();
    for (int k = 0; k < 3; ++k) {
      const int64_t r0 = static_cast<int64_t>(rng() % rows);
      const int64_t n = 1 + static_cast<int64_t>(rng() % (rows - r0));
      std::vector<uint8_t> part(n * t.row_bytes());
      m.FillRows(t, r0, n, part.data());
      ASSERT_EQ(std::memcmp(part.data(), info->data + r0 * t.row_bytes(), part.size()), 0)
          << t.spec.name << " rows " << r0 << "+" << n;
    }
    if (t.blocks_per_row >= 2) {  // the second half of each row
      const int64_t be = t.block_elems, half = static_cast<int64_t>(t.blocks_per_row / 2) * be;
      const int64_t cols = t.spec.ne[0] - half, n_rows = std::min<int64_t>(rows, 5);
      std::vector<uint8_t> band(n_rows * (cols / be) * t.block_bytes);
      ASSERT_TRUE(m.FillColumns(t, 0, n_rows, half, cols, band.data()).ok());
      for (int64_t r = 0; r < n_rows; ++r) {
        const size_t nb = cols / be * t.block_bytes;
        ASSERT_EQ(std::memcmp(band.data() + r * nb, info->data + r * t.row_bytes() + half / be * t.block_bytes, nb), 0)
            << t.spec.name << " column band, row " << r;
      }
      EXPECT_FALSE(m.FillColumns(t, 0, 1, be == 1 ? t.spec.ne[0] : 1, be, band.data()).ok())
          << "misaligned or out-of-range columns must be refused";
    }
  }
}

class RealDataPreset : public ::testing::TestWithParam<std::string> {};

TEST_P(RealDataPreset, ParsesValidatesAndHoldsTheFill) {
  TempDir dir;
  auto m = PresetModel(GetParam());
  ASSERT_TRUE(m.ok()) << m.status();
  auto path = WriteTo(*m, dir, GetParam() + ".gguf");
  ASSERT_TRUE(path.ok()) << path.status();
  model::K3Config c;
  auto f = OpenValid(*path, &c);
  ASSERT_NE(f, nullptr);
  ExpectSameShapes(c, *PresetConfig(GetParam()));
  ExpectFileIsTheFill(*m, *f);
  // The routed experts keep the published type: no block-size fallback in any preset.
  EXPECT_EQ(f->FindTensor("blk.1.ffn_gate_exps.weight")->type, quant::GgmlType::kIQ1_S);
  EXPECT_EQ(f->FindTensor("blk.1.ffn_down_exps.weight")->type, quant::GgmlType::kIQ1_S);
}

INSTANTIATE_TEST_SUITE_P(Synth, RealDataPreset, ::testing::Values("tiny", "small", "tp8"));

TEST(SynthModel, MetadataHasTheGoldenFilesTypes) {
  TempDir dir;
  auto m = PresetModel("tiny");
  ASSERT_TRUE(m.ok());
  auto path = WriteTo(*m, dir, "t.gguf", WriteOptions{.header_only = true});
  ASSERT_TRUE(path.ok()) << path.status();
  auto f = gguf::GgufFile::Open(*path, /*allow_header_only=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  using gguf::ValueType;
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "kimi-k3");
  EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.model"), "no_vocab");
  EXPECT_EQ(*(*f)->GetString("general.name"), "k3-synth-tiny");
  EXPECT_EQ((*f)->TypeOf("kimi-k3.attention.head_count_kv"), ValueType::kArray);
  EXPECT_EQ((*f)->ArrayTypeOf("kimi-k3.attention.head_count_kv"), ValueType::kI32);
  EXPECT_EQ(*(*f)->GetArrayI32("kimi-k3.attention.head_count_kv"), (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ((*f)->TypeOf("kimi-k3.expert_weights_norm"), ValueType::kBool);
  EXPECT_EQ(*(*f)->GetU32("kimi-k3.vocab_size"), 2048u);
  for (const char* k : {"block_count", "embedding_length", "expert_latent_length", "attn_res.block_size",
                        "attention.key_length", "attention.key_length_mla", "expert_gating_func"}) {
    EXPECT_EQ((*f)->TypeOf(std::string("kimi-k3.") + k), ValueType::kU32) << k;
  }
  for (const char* k : {"activation.situ_beta", "activation.situ_linear_beta", "kda.gate_lower_bound",
                        "attention.layer_norm_rms_epsilon", "expert_weights_scale"}) {
    EXPECT_EQ((*f)->TypeOf(std::string("kimi-k3.") + k), ValueType::kF32) << k;
  }
}

TEST(SynthModel, BytesDependOnlyOnTheSeed) {
  TempDir dir;
  auto m1 = PresetModel("tiny", 1);
  auto m2 = PresetModel("tiny", 2);
  ASSERT_TRUE(m1.ok() && m2.ok());
  // Different thread counts and chunk sizes (many chunks per tensor) must not change a byte.
  auto a = WriteTo(*m1, dir, "a.gguf", WriteOptions{.threads = 1});
  auto b = WriteTo(*m1, dir, "b.gguf", WriteOptions{.threads = 3, .chunk_bytes = 4096});
  auto c = WriteTo(*m2, dir, "c.gguf");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(testing::ReadAll(*a), testing::ReadAll(*b));
  auto fa = gguf::GgufFile::Open(*a);
  auto fc = gguf::GgufFile::Open(*c);
  ASSERT_TRUE(fa.ok() && fc.ok());
  ASSERT_EQ((*fa)->tensors().size(), (*fc)->tensors().size());
  for (size_t i = 0; i < (*fa)->tensors().size(); ++i) {
    const gguf::TensorInfo& x = (*fa)->tensors()[i];
    const gguf::TensorInfo& y = (*fc)->tensors()[i];
    EXPECT_EQ(x.file_offset, y.file_offset);  // same layout ...
    EXPECT_NE(std::memcmp(x.data, y.data, x.n_bytes), 0) << x.name;  // ... other values
  }
}

TEST(SynthModel, ShardedOutputReadsBackAsOneModel) {
  TempDir dir;
  auto m = PresetModel("tiny");
  ASSERT_TRUE(m.ok());
  auto r = WriteModel(*m, dir.File("s.gguf"), WriteOptions{.shards = 3});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->paths.size(), 3u);
  EXPECT_EQ(r->paths[0], dir.File("s-00001-of-00003.gguf"));
  model::K3Config c;
  auto f = OpenValid(r->paths[0], &c);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->shard_paths().size(), 3u);
  ExpectFileIsTheFill(*m, *f);
}

TEST(SynthModel, OptionalTensorsCanBeLeftOut) {
  TempDir dir;
  auto m = PresetModel("tiny", 1, "UD-IQ1_S", {}, /*optional_tensors=*/false);
  ASSERT_TRUE(m.ok());
  auto path = WriteTo(*m, dir, "n.gguf");
  ASSERT_TRUE(path.ok());
  model::K3Config c;
  auto f = OpenValid(*path, &c);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->FindTensor("blk.3.attn_gate.weight"), nullptr);
  EXPECT_EQ(f->FindTensor("blk.1.ffn_routed_norm.weight"), nullptr);
}

// Every type the engine computes with, in one file (K-quants, IQ2, F16/BF16 matrices).
TEST(SynthModel, EveryMustHaveTypeCanBeWritten) {
  TempDir dir;
  auto m = PresetModel("tiny", 1, "UD-Q2_K_XL",
                       {"blk.1.ffn_gate_exps.weight=IQ2_XXS", "blk.2.ffn_gate_exps.weight=Q2_K",
                        "blk.1.ffn_up_exps.weight=Q3_K", "blk.2.ffn_up_exps.weight=Q4_K",
                        "blk.3.ffn_up_exps.weight=Q5_K", "blk.*.ffn_down_exps.weight=Q6_K",
                        "blk.0.attn_q.weight=F16", "blk.0.attn_k.weight=BF16", "output_norm.weight=F16"});
  ASSERT_TRUE(m.ok()) << m.status();
  auto path = WriteTo(*m, dir, "q.gguf");
  ASSERT_TRUE(path.ok()) << path.status();
  model::K3Config c;
  auto f = OpenValid(*path, &c);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->FindTensor("blk.3.ffn_gate_exps.weight")->type, quant::GgmlType::kIQ2_XS);
  EXPECT_EQ(f->FindTensor("blk.2.ffn_up_exps.weight")->type, quant::GgmlType::kQ4_K);
  EXPECT_EQ(f->FindTensor("blk.0.attn_k.weight")->type, quant::GgmlType::kBF16);
  ExpectFileIsTheFill(*m, *f);
}

TEST(SynthModel, FillTensorBytesNeedsNoModel) {
  auto m = PresetModel("tiny", 7);
  ASSERT_TRUE(m.ok());
  for (const SynthTensor& t : m->tensors()) {
    const uint64_t n = std::min<uint64_t>(t.n_blocks, 9);
    std::vector<uint8_t> a(n * t.block_bytes), b(n * t.block_bytes);
    m->FillBlocks(t, t.n_blocks - n, n, a.data());
    FillTensorBytes(m->config(), t.spec, t.type, 7, t.n_blocks - n, n, b.data());
    ASSERT_EQ(a, b) << t.spec.name;
  }
}

TEST(SynthModel, SliceHeaderParsesAtRealWidth) {
  for (const int64_t layers : {8, 5}) {  // the preset, and --layers 5
    TempDir dir;
    auto c = PresetConfig("slice");
    ASSERT_TRUE(c.ok());
    SizeOverrides o;
    o.layers = layers;
    ASSERT_TRUE(ApplyOverrides(o, &*c).ok());
    auto m = SynthModel::Create(*c, *model::QuantMix::Preset("UD-IQ1_S"), SynthOptions{});
    ASSERT_TRUE(m.ok()) << m.status();
    auto path = WriteTo(*m, dir, "slice.gguf", WriteOptions{.header_only = true});
    ASSERT_TRUE(path.ok()) << path.status();
    model::K3Config got;
    auto f = OpenValid(*path, &got, /*header_only=*/true);
    ASSERT_NE(f, nullptr);
    ExpectSameShapes(got, *c);
    EXPECT_EQ(got.n_layers, layers);
    EXPECT_EQ(got.hidden, 7168);
    EXPECT_EQ(got.expert_latent, 3584);
    EXPECT_EQ(f->FindTensor("blk.4.ffn_gate_exps.weight")->ne, (std::vector<int64_t>{3584, 3072, 896}));
    EXPECT_EQ(f->FindTensor("blk.0.ffn_down.weight")->ne, (std::vector<int64_t>{33792, 7168}));
    EXPECT_TRUE(got.is_mla(3));
    EXPECT_FALSE(got.is_mla(4));
  }
}

}  // namespace
}  // namespace k3::synth
