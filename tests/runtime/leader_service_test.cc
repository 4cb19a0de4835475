// The leader's endpoint (k3.v1.Worker) over loopback, on a one-rank group with a stand-in
// engine: with a token (k3-worker --auth-token-file) RunStep and GetInfo are UNAUTHENTICATED
// without it and work with it; idle() (what --coordinator-timeout watches) counts from the last
// accepted call, and refused calls do not keep the group alive; a GetInfo from a new
// coordinator session frees what the previous coordinator left.
#include "worker/runtime/leader_service.h"

#include <chrono>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "collectives/communicator.h"
#include "k3/v1/worker.grpc.pb.h"
#include "worker/common/grpc_security.h"
#include "worker/runtime/worker_group.h"

namespace k3::runtime {
namespace {

constexpr char kToken[] = "worker-token-0123456789";
constexpr int64_t kVocab = 8;

// Every sequence operation succeeds; the logits of a row are 0..vocab-1, so token vocab-1 wins.
class FakeEngine final : public RankEngine {
 public:
  absl::Status Add(engine::SeqId) override { return absl::OkStatus(); }
  absl::Status Free(engine::SeqId id) override {
    freed.push_back(id);
    return absl::OkStatus();
  }
  std::vector<engine::SeqId> freed;
  absl::Status Fork(engine::SeqId, engine::SeqId) override { return absl::OkStatus(); }
  absl::StatusOr<engine::ForwardResult> Forward(std::span<const engine::SeqInput> batch) override {
    engine::ForwardResult r;
    r.vocab = kVocab;
    r.band_width = kVocab;
    for (size_t i = 0; i < batch.size(); ++i) {
      r.first_row.push_back(static_cast<int64_t>(i));
      r.n_rows.push_back(1);
      for (int64_t v = 0; v < kVocab; ++v) r.logits.push_back(static_cast<float>(v));
    }
    return r;
  }
  int64_t vocab_band_width() const override { return kVocab; }
  int64_t free_slots() const override { return 4; }
  int64_t free_cache_tokens() const override { return 1024; }
};

class LeaderServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& token) {
    comm_ = coll::MakeLocalCommunicator();
    group_ = std::make_unique<WorkerGroup>(engine_, *comm_);
    LeaderInfo info;
    info.model_name = "fake";
    info.max_seqs = 4;
    info.page_size = 16;
    service_ = std::make_unique<LeaderService>(*group_, engine_, info, security::BearerAuth(token));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port > 0);
    stub_ = k3::v1::Worker::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                         grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    if (service_) {
      EXPECT_TRUE(service_->Shutdown().ok());
    }
  }

  grpc::Status Info(const std::string& token, k3::v1::WorkerInfo* info = nullptr, uint64_t session = 0) {
    grpc::ClientContext ctx;
    security::AddBearer(ctx, token);
    k3::v1::WorkerInfo local;
    k3::v1::WorkerInfoRequest req;
    req.set_session(session);
    return stub_->GetInfo(&ctx, req, info ? info : &local);
  }
  grpc::Status Step(const std::string& token, uint64_t id, k3::v1::StepResponse* resp) {
    k3::v1::StepRequest req;
    req.set_id(id);
    req.add_add(static_cast<int64_t>(id));
    auto* e = req.add_entries();
    e->set_seq(static_cast<int64_t>(id));
    e->add_tokens(1);
    e->add_tokens(2);
    e->set_top_n(1);
    grpc::ClientContext ctx;
    security::AddBearer(ctx, token);
    return stub_->RunStep(&ctx, req, resp);
  }

  FakeEngine engine_;
  std::unique_ptr<coll::Communicator> comm_;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<LeaderService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<k3::v1::Worker::Stub> stub_;
};

TEST_F(LeaderServiceTest, OnlyTheTokenRunsSteps) {
  Start(kToken);
  k3::v1::StepResponse resp;
  grpc::Status s = Step("", 1, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = Step("not-the-token-0123456789", 1, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(Info("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  k3::v1::WorkerInfo info;
  ASSERT_TRUE(Info(kToken, &info).ok());
  EXPECT_EQ(info.model_name(), "fake");
  s = Step(kToken, 2, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.entries_size(), 1);
  ASSERT_GE(resp.entries(0).rows_size(), 1);
  EXPECT_EQ(resp.entries(0).rows(0).top(0).token(), kVocab - 1);
}

TEST_F(LeaderServiceTest, WithoutATokenItIsOpenAsBefore) {
  Start("");
  k3::v1::StepResponse resp;
  EXPECT_TRUE(Info("").ok());
  EXPECT_TRUE(Step("", 1, &resp).ok());
}

TEST_F(LeaderServiceTest, IdleCountsFromTheLastAcceptedCall) {
  Start(kToken);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GE(service_->idle(), std::chrono::milliseconds(300));  // from the start, before any call
  ASSERT_TRUE(Info(kToken).ok());
  EXPECT_LT(service_->idle(), std::chrono::milliseconds(200));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A caller without the token does not reset it: a stranger cannot keep an orphaned group up.
  EXPECT_EQ(Info("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_GE(service_->idle(), std::chrono::milliseconds(300));
}

TEST_F(LeaderServiceTest, ANewCoordinatorSessionFreesWhatTheOldOneLeft) {
  Start("");
  k3::v1::StepResponse resp;
  ASSERT_TRUE(Info("", nullptr, 11).ok());
  ASSERT_TRUE(Step("", 1, &resp).ok());  // adds sequence 1
  ASSERT_TRUE(Step("", 2, &resp).ok());  // adds sequence 2
  ASSERT_TRUE(Info("", nullptr, 11).ok());
  EXPECT_TRUE(engine_.freed.empty()) << "the same session must keep its sequences";
  // Coordinator 11 died mid-request; coordinator 22 comes.
  ASSERT_TRUE(Info("", nullptr, 22).ok());
  EXPECT_EQ(engine_.freed, (std::vector<engine::SeqId>{1, 2}));
  ASSERT_TRUE(Info("", nullptr, 22).ok());
  EXPECT_EQ(engine_.freed.size(), 2u);
  // Its own sequence 1 now adds cleanly, and it keeps it.
  ASSERT_TRUE(Step("", 1, &resp).ok());
  ASSERT_TRUE(Info("", nullptr, 22).ok());
  EXPECT_EQ(engine_.freed.size(), 2u);
}

}  // namespace
}  // namespace k3::runtime
