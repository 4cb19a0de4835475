// The per-rank timeline: one forward pass records the spans the docs promise (a step, the
// embedding, every layer's attention and FFN, every all-reduce, the LM head), as Chrome trace
// JSON; tracing off records nothing and changes no logit.
#include <filesystem>

#include <gtest/gtest.h>

#include "worker/common/trace.h"
#include "worker/engine/engine.h"

namespace k3::engine {
namespace {

const std::string kGolden = std::string(K3_SHARED_DIR) + "/data/golden/k3-golden-a.gguf";

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Trace, OneForwardRecordsEveryLayerAndCollective) {
  if (!std::filesystem::exists(kGolden)) GTEST_SKIP() << "golden file not found at " << kGolden;
  Tracer tracer(3, "rank 3");
  EngineOptions traced;
  traced.tracer = &tracer;
  traced.cache_tokens = 1024;
  auto e = Engine::Open(kGolden, traced);
  ASSERT_TRUE(e.ok()) << e.status();
  auto plain = Engine::Open(kGolden, EngineOptions{.max_seqs = 8, .cache_tokens = 1024});
  ASSERT_TRUE(plain.ok());
  std::vector<int32_t> toks = {5, 6, 7};
  ASSERT_TRUE((*e)->cache().Add(1).ok());
  ASSERT_TRUE((*plain)->cache().Add(1).ok());
  SeqInput in{1, toks, false};
  auto a = (*e)->Forward(std::span<const SeqInput>(&in, 1));
  auto b = (*plain)->Forward(std::span<const SeqInput>(&in, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->logits, b->logits);  // tracing changes nothing computed

  const auto& c = (*e)->config();
  const std::string json = tracer.ToJson();
  EXPECT_EQ(json.front(), '[');
  EXPECT_EQ(Count(json, "\"name\":\"forward\""), 1u);
  EXPECT_EQ(Count(json, "\"name\":\"embed\""), 1u);
  EXPECT_EQ(Count(json, "\"name\":\"kda\""), static_cast<size_t>(c.n_kda_layers()));
  EXPECT_EQ(Count(json, "\"name\":\"mla\""), static_cast<size_t>(c.n_mla_layers()));
  EXPECT_EQ(Count(json, "\"name\":\"dense_ffn\""), static_cast<size_t>(c.n_dense_layers));
  EXPECT_EQ(Count(json, "\"name\":\"moe\""), static_cast<size_t>(c.n_layers - c.n_dense_layers));
  // One all-reduce per attention and per FFN; the embedding's is inside "embed".
  EXPECT_EQ(Count(json, "\"name\":\"all_reduce\""), static_cast<size_t>(2 * c.n_layers));
  EXPECT_EQ(Count(json, "\"name\":\"lm_head\""), 1u);
  EXPECT_EQ(Count(json, "\"pid\":3"), tracer.size() + 1);  // + the process-name record
  EXPECT_EQ(tracer.dropped(), 0u);
}

TEST(Trace, BoundedMemory) {
  Tracer t(0, "x", /*max_events=*/4);
  for (int i = 0; i < 10; ++i) t.Span("s", "c", t.NowUs());
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.dropped(), 6u);
}

}  // namespace
}  // namespace k3::engine
