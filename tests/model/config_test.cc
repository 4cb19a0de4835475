// The kimi-k3 config: the golden file's values, each required key refused when missing, and the
// three traps of spec section 2 failing loudly instead of loading into fluent garbage.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "tests/model/model_test_util.h"
#include "worker/model/k3_config.h"
#include "worker/model/tensor_manifest.h"

namespace k3::model {
namespace {

const std::string kGolden = std::string(K3_SHARED_DIR) + "/data/golden/k3-golden-a.gguf";

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kGolden)) GTEST_SKIP() << "golden file not found at " << kGolden;
    auto f = gguf::GgufFile::Open(kGolden);
    ASSERT_TRUE(f.ok()) << f.status();
    golden_ = std::move(*f);
    model_ = testing::EditableModel::From(*golden_);
    dir_ = std::filesystem::temp_directory_path() / ("k3_config_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<K3Config> Parse(const testing::EditableModel& m) {
    auto f = m.WriteAndOpen((dir_ / "edited.gguf").string());
    if (!f.ok()) return f.status();
    file_ = std::move(*f);
    return ParseK3Config(*file_);
  }

  std::unique_ptr<gguf::GgufFile> golden_, file_;
  testing::EditableModel model_;
  std::filesystem::path dir_;
};

TEST_F(ConfigTest, GoldenFileLoads) {
  auto c = ParseK3Config(*golden_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_layers, 8);
  EXPECT_EQ(c->hidden, 512);
  EXPECT_EQ(c->n_heads, 4);
  std::vector<int64_t> mla;
  for (int64_t il = 0; il < c->n_layers; ++il) {
    if (c->is_mla(il)) mla.push_back(il);
  }
  EXPECT_EQ(mla, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(c->expert_latent, 256);
  EXPECT_EQ(c->res_block_size, 3);
  EXPECT_EQ(c->mla_row, 576);
  EXPECT_EQ(c->qk_nope_dim, 128);
  EXPECT_EQ(c->qk_rope_dim, 64);
  EXPECT_EQ(c->n_experts, 32);
  EXPECT_EQ(c->n_experts_used, 4);
  EXPECT_EQ(c->vocab, 4096);
  EXPECT_TRUE(c->has_gate_lower_bound);
  EXPECT_FLOAT_EQ(c->gate_lower_bound, -5.0f);
  EXPECT_TRUE(ValidateManifest(*c, *golden_).ok());
}

TEST_F(ConfigTest, EveryRequiredKeyIsRefusedByName) {
  const std::vector<std::string> required = {
      "block_count", "embedding_length", "context_length", "attention.head_count",
      "attention.layer_norm_rms_epsilon", "attention.head_count_kv", "attn_res.block_size",
      "activation.situ_beta", "activation.situ_linear_beta", "attention.q_lora_rank",
      "attention.kv_lora_rank", "rope.dimension_count", "attention.key_length_mla",
      "attention.value_length_mla", "attention.key_length", "attention.value_length", "kda.head_dim",
      "ssm.conv_kernel", "leading_dense_block_count", "feed_forward_length", "expert_count",
      "expert_used_count", "expert_shared_count", "expert_feed_forward_length",
      "expert_latent_length", "expert_gating_func"};
  for (const std::string& k : required) {
    testing::EditableModel m = model_;
    m.Drop("kimi-k3." + k);
    auto c = Parse(m);
    ASSERT_FALSE(c.ok()) << "loaded without kimi-k3." << k;
    EXPECT_NE(std::string(c.status().message()).find("kimi-k3." + k), std::string::npos) << c.status();
  }
}

TEST_F(ConfigTest, WrongTypeIsRefused) {
  testing::EditableModel m = model_;
  m.Set("kimi-k3.expert_latent_length", gguf::MakeScalar<float>(256.0f));
  auto c = Parse(m);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("expert_latent_length"), std::string::npos);
}

// Trap 1: layer kinds come only from the head_count_kv array, never from a count or a list.
TEST_F(ConfigTest, Trap1LayerKindsOnlyFromTheArray) {
  testing::EditableModel m = model_;
  m.Set("kimi-k3.attention.head_count_kv", gguf::MakeScalar<uint32_t>(1));
  auto c = Parse(m);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("per-layer"), std::string::npos) << c.status();
  // An array of the wrong length, and a value other than 0/1, are refused too.
  m.Set("kimi-k3.attention.head_count_kv", gguf::MakeArray<int32_t>(std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_FALSE(Parse(m).ok());
  m.Set("kimi-k3.attention.head_count_kv", gguf::MakeArray<int32_t>(std::vector<int32_t>{0, 0, 0, 2, 0, 0, 0, 1}));
  EXPECT_FALSE(Parse(m).ok());
  // A 1-indexed list shifted by one (MLA at 4 and 8 would be 0-based 3 and 7) loads with the
  // kinds the array says and then fails the manifest: layer 4 has KDA tensors, not MLA ones.
  m.Set("kimi-k3.attention.head_count_kv", gguf::MakeArray<int32_t>(std::vector<int32_t>{0, 0, 0, 0, 1, 0, 0, 0}));
  auto shifted = Parse(m);
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  auto v = ValidateManifest(*shifted, *file_);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.message()).find("blk.4.attn_q_a.weight"), std::string::npos) << v;
  // The real model: 0-based 3, 7, ..., 91 and 92.
  const K3Config real = RealK3Config();
  std::vector<int64_t> mla;
  for (int64_t il = 0; il < real.n_layers; ++il) {
    if (real.is_mla(il)) mla.push_back(il);
  }
  ASSERT_EQ(mla.size(), 24u);
  EXPECT_EQ(mla.front(), 3);
  EXPECT_EQ(mla[22], 91);
  EXPECT_EQ(mla.back(), 92);
}

// Trap 2: MLA is stored as MQA (one "KV head", key_length 576); it has n_heads query heads and
// a 576-wide latent row, and the row must be kv_lora + rope.
TEST_F(ConfigTest, Trap2MlaIsNotMqa) {
  auto c = ParseK3Config(*golden_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mla_row, c->kv_lora_rank + c->qk_rope_dim);
  EXPECT_EQ(c->mla_qk_head_dim(), 192);  // the attention scale is 1/sqrt(192), not 1/sqrt(576)
  testing::EditableModel m = model_;
  m.Set("kimi-k3.attention.key_length", gguf::MakeScalar<uint32_t>(192));
  auto bad = Parse(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("stored as MQA"), std::string::npos) << bad.status();
}

// Trap 3: routed experts live in the latent space: their tensors are latent-wide, and a file
// whose experts are hidden-wide does not load.
TEST_F(ConfigTest, Trap3LatentExperts) {
  auto c = ParseK3Config(*golden_);
  ASSERT_TRUE(c.ok());
  for (const TensorSpec& s : ExpectedTensors(*c)) {
    if (s.base == "ffn_gate_exps") {
      EXPECT_EQ(s.ne[0], c->expert_latent);
    }
    if (s.base == "ffn_down_exps") {
      EXPECT_EQ(s.ne[1], c->expert_latent);
    }
  }
  // Claim a latent width equal to the hidden width: the expert tensors no longer match.
  testing::EditableModel m = model_;
  m.Set("kimi-k3.expert_latent_length", gguf::MakeScalar<uint32_t>(512));
  auto wide = Parse(m);
  ASSERT_TRUE(wide.ok());
  auto v = ValidateManifest(*wide, *file_);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.message()).find("ffn_gate_exps"), std::string::npos) << v;
}

TEST_F(ConfigTest, ManifestListsEveryProblem) {
  testing::EditableModel m = model_;
  m.Find("blk.2.attn_q.weight")->ne = {512, 256};
  m.Find("blk.1.ffn_up_exps.weight")->type = quant::GgmlType::kIQ3_S;  // not a must-have type
  std::erase_if(m.tensors, [](const auto& t) { return t.name == "output_norm.weight"; });
  m.tensors.push_back({"blk.0.mystery.weight", {512}, quant::GgmlType::kF32});
  auto c = Parse(m);
  ASSERT_TRUE(c.ok());
  auto v = ValidateManifest(*c, *file_);
  ASSERT_FALSE(v.ok());
  const std::string msg(v.message());
  EXPECT_NE(msg.find("blk.2.attn_q.weight has shape {512, 256}"), std::string::npos) << msg;
  EXPECT_NE(msg.find("blk.1.ffn_up_exps.weight has type IQ3_S"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing output_norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected tensor blk.0.mystery.weight"), std::string::npos) << msg;
}

TEST_F(ConfigTest, ArchitectureMustBeKimiK3) {
  testing::EditableModel m = model_;
  m.Set("general.architecture", gguf::MakeString("deepseek2"));
  EXPECT_FALSE(Parse(m).ok());
}

}  // namespace
}  // namespace k3::model
