// The step message a rank sends its leader comes from RankEngine::ForwardBands. On the CPU
// backend (its default: Forward + SummarizeBand) the message must be byte for byte what the step
// loop built before ForwardBands existed; that code is kept below as the reference and run on a
// second engine with the same history. Prefill and decode, all positions or the last, full
// logits or not, top_n from 1 to kMaxTopN.
#include <cstring>
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/communicator.h"
#include "tests/common/golden_data.h"
#include "worker/engine/engine.h"
#include "worker/runtime/band_merge.h"
#include "worker/runtime/worker_group.h"

namespace k3::runtime {
namespace {

const std::string kGolden = std::string(K3_SHARED_DIR) + "/data/golden/";

// One rank; keeps what it sends in each Gather (the rank's step message).
class RecordingCommunicator final : public coll::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduceSum(float* data, int64_t n) override { return local_->AllReduceSum(data, n); }
  absl::Status AllGather(const void* send, void* recv, int64_t bytes) override {
    return local_->AllGather(send, recv, bytes);
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override { return local_->Broadcast(data, bytes, root); }
  absl::Status Gather(const void* send, void* recv, int64_t bytes, int root) override {
    const auto* p = static_cast<const uint8_t*>(send);
    last.assign(p, p + bytes);
    return local_->Gather(send, recv, bytes, root);
  }
  absl::Status Barrier() override { return local_->Barrier(); }
  std::vector<uint8_t> last;

 private:
  std::unique_ptr<coll::Communicator> local_ = coll::MakeLocalCommunicator();
};

// The step loop's message before ForwardBands (worker_group.cc at 9eea787), for a step that succeeds.
std::vector<uint8_t> LegacyMessage(engine::Engine& e, const Step& step) {
  constexpr int64_t kHeaderBytes = 256;
  const int64_t band_width = e.shard().vocab_width;
  std::vector<uint8_t> msg(SummaryBytes(step, band_width), 0);
  for (SeqId id : step.free) EXPECT_TRUE(e.cache().Free(id).ok());
  for (SeqId id : step.add) EXPECT_TRUE(e.cache().Add(id).ok());
  if (step.entries.empty()) return msg;
  std::vector<engine::SeqInput> inputs;
  for (const StepEntry& en : step.entries) inputs.push_back({en.seq, en.tokens, en.all_positions});
  auto result = e.Forward(inputs);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  uint8_t* p = msg.data() + kHeaderBytes;
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& en = step.entries[i];
    const int64_t rows = en.all_positions ? static_cast<int64_t>(en.tokens.size()) : 1;
    for (int64_t row = 0; row < rows; ++row) {
      const float* logits = result->row(i, row);
      std::vector<Candidate> top(en.top_n);
      float lse = 0;
      SummarizeBand(logits, band_width, result->band_begin, en.top_n, top.data(), &lse);
      std::memcpy(p, top.data(), top.size() * sizeof(Candidate));
      p += top.size() * sizeof(Candidate);
      std::memcpy(p, &lse, 4);
      p += 4;
      if (en.full_logits) {
        std::memcpy(p, logits, band_width * 4);
        p += band_width * 4;
      }
    }
  }
  return msg;
}

std::unique_ptr<engine::Engine> OpenGolden() {
  engine::EngineOptions opt;
  opt.cache_tokens = 4096;
  opt.page_size = 16;
  auto e = engine::Engine::Open(kGolden + "k3-golden-a.gguf", opt);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(WorkerGroupBands, CpuMessagesAreByteIdenticalToTheLegacyPath) {
  if (!std::filesystem::exists(kGolden + "k3-golden-a.gguf")) GTEST_SKIP() << "golden data not found at " << kGolden;
  const auto prompts = k3::testing::ReadGoldenPrompts(kGolden + "prompts-a.txt");
  ASSERT_EQ(prompts.size(), 4u);
  auto mine = OpenGolden(), ref = OpenGolden();
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(ref, nullptr);
  CpuRankEngine rank_engine(*mine);
  RecordingCommunicator comm;
  WorkerGroup group(rank_engine, comm);

  std::vector<Step> steps(4);
  steps[0].add = {1, 2};
  steps[0].entries = {{1, prompts[1], 8, true, true}, {2, prompts[2], kMaxTopN, false, false}};
  steps[1].entries = {{1, {prompts[3][0]}, 1, false, false}, {2, {prompts[3][1]}, 40, true, false}};
  steps[2].add = {3};
  steps[2].entries = {{3, prompts[0], 3, false, true}, {1, {prompts[3][2], prompts[3][3]}, kMaxTopN, true, true}};
  steps[3].free = {2};  // no forward: the header alone
  for (size_t s = 0; s < steps.size(); ++s) {
    steps[s].id = s + 1;
    auto got = group.LeaderStep(steps[s]);
    ASSERT_TRUE(got.ok()) << "step " << s << ": " << got.status();
    const std::vector<uint8_t> want = LegacyMessage(*ref, steps[s]);
    ASSERT_EQ(comm.last.size(), want.size()) << "step " << s;
    EXPECT_EQ(std::memcmp(comm.last.data(), want.data(), want.size()), 0) << "step " << s << ": messages differ";
  }
}

// An engine whose summaries do not fit the step is an error of the step, not a buffer overrun.
class MisshapenEngine final : public RankEngine {
 public:
  absl::Status Add(engine::SeqId) override { return absl::OkStatus(); }
  absl::Status Free(engine::SeqId) override { return absl::OkStatus(); }
  absl::Status Fork(engine::SeqId, engine::SeqId) override { return absl::OkStatus(); }
  absl::StatusOr<engine::ForwardResult> Forward(std::span<const engine::SeqInput>) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::vector<std::vector<RowOutput>>> ForwardBands(std::span<const StepEntry> entries) override {
    std::vector<std::vector<RowOutput>> out(entries.size(), std::vector<RowOutput>(1));
    for (auto& rows : out) rows[0].top.resize(1);  // one candidate, whatever top_n says
    return out;
  }
  int64_t vocab_band_width() const override { return 16; }
  int64_t free_slots() const override { return 4; }
  int64_t free_cache_tokens() const override { return 1024; }
};

TEST(WorkerGroupBands, MisshapenSummariesFailTheStep) {
  MisshapenEngine engine;
  RecordingCommunicator comm;
  WorkerGroup group(engine, comm);
  Step step;
  step.id = 1;
  step.entries = {{1, {3}, 1, false, false}};
  EXPECT_TRUE(group.LeaderStep(step).ok());
  step.id = 2;
  step.entries = {{1, {3}, 5, false, false}};
  auto r = group.LeaderStep(step);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("do not match"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace k3::runtime
