// The leader's endpoint (k3.v1.Worker) over loopback, on a one-rank group with a stand-in
// engine: with a token (k3-worker --auth-token-file) RunStep and GetInfo are UNAUTHENTICATED
// without it and work with it; idle() (what --coordinator-timeout watches) counts from the last
// accepted call, and refused calls do not keep the group alive; a GetInfo from a new
// coordinator session frees what the previous coordinator left. The step channel
// (step_channel.h, k3-worker --step-port): its hello wants the token, its steps answer as RunStep
// does and a malformed frame is refused without ending the connection; the coordinator's
// WorkerClient finds it through GetInfo, runs steps over it, and when it dies fails that step
// (UNAVAILABLE) and runs the next over gRPC.
#include "worker/runtime/leader_service.h"

#include <chrono>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "collectives/communicator.h"
#include "k3/v1/worker.grpc.pb.h"
#include "coordinator/server/worker_client.h"
#include "worker/common/frame_socket.h"
#include "worker/common/grpc_security.h"
#include "worker/common/step_channel_protocol.h"
#include "worker/runtime/step_channel.h"
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
  void Start(const std::string& token, bool step_channel = false) {
    comm_ = coll::MakeLocalCommunicator();
    group_ = std::make_unique<WorkerGroup>(engine_, *comm_);
    LeaderInfo info;
    info.model_name = "fake";
    info.max_seqs = 4;
    info.page_size = 16;
    if (step_channel) {  // a free port, as k3-worker --step-port would name one
      auto probe = net::FrameListener::Listen("127.0.0.1", 0);
      ASSERT_TRUE(probe.ok()) << probe.status();
      step_port_ = probe->port();
      info.step_port = static_cast<uint32_t>(step_port_);
    }
    service_ = std::make_unique<LeaderService>(*group_, engine_, info, security::BearerAuth(token));
    if (step_channel) {
      channel_ = std::make_unique<StepChannelServer>(*service_, security::BearerAuth(token));
      ASSERT_TRUE(channel_->Start("127.0.0.1", step_port_).ok());
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port_ > 0);
    stub_ = k3::v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (channel_) channel_->Stop();
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
  static k3::v1::StepRequest StepRequest(uint64_t id) {
    k3::v1::StepRequest req;
    req.set_id(id);
    req.add_add(static_cast<int64_t>(id));
    auto* e = req.add_entries();
    e->set_seq(static_cast<int64_t>(id));
    e->add_tokens(1);
    e->add_tokens(2);
    e->set_top_n(1);
    return req;
  }
  grpc::Status Step(const std::string& token, uint64_t id, k3::v1::StepResponse* resp) {
    const k3::v1::StepRequest req = StepRequest(id);
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
  std::unique_ptr<StepChannelServer> channel_;
  int port_ = 0, step_port_ = 0;
};

// A raw connection to the step channel after a hello with `token`: the leader's answer.
std::string Hello(net::FrameSocket& s, int port, const std::string& token) {
  auto c = net::FrameSocket::Connect("127.0.0.1", port, std::chrono::seconds(5));
  if (!c.ok()) return "connect: " + c.status().ToString();
  s = std::move(*c);
  if (!s.Write(std::string(net::kStepHello) + token).ok()) return "write failed";
  auto r = s.Read(std::chrono::microseconds(0), std::chrono::steady_clock::now() + std::chrono::seconds(5));
  return r.ok() ? *r : r.status().ToString();
}

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

TEST_F(LeaderServiceTest, StepChannelHelloWantsTheToken) {
  Start(kToken, /*step_channel=*/true);
  net::FrameSocket s;
  EXPECT_EQ(Hello(s, step_port_, ""), "unauthenticated");
  EXPECT_EQ(Hello(s, step_port_, "not-the-token-0123456789"), "unauthenticated");
  // Before the token is checked only a small frame is read: a large one ends the connection.
  const std::string big = Hello(s, step_port_, std::string(5000, 'x'));
  EXPECT_NE(big, net::kStepHelloOk);
  EXPECT_NE(big, "unauthenticated") << "a large hello must not even be read";
  EXPECT_EQ(Hello(s, step_port_, kToken), net::kStepHelloOk);
}

TEST_F(LeaderServiceTest, StepChannelStepsAnswerAsRunStepDoes) {
  Start("", /*step_channel=*/true);
  net::FrameSocket s;
  ASSERT_EQ(Hello(s, step_port_, ""), net::kStepHelloOk);
  const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
  ASSERT_TRUE(s.Write(StepRequest(7).SerializeAsString()).ok());
  auto r = s.Read(std::chrono::microseconds(100), deadline());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE(r->size(), 1u);
  ASSERT_EQ((*r)[0], 0) << r->substr(1);
  k3::v1::StepResponse resp;
  ASSERT_TRUE(resp.ParseFromString(r->substr(1)));
  EXPECT_EQ(resp.id(), 7u);
  ASSERT_EQ(resp.entries_size(), 1);
  EXPECT_EQ(resp.entries(0).rows(0).top(0).token(), kVocab - 1);
  // A malformed frame: INVALID_ARGUMENT, and the connection still serves.
  ASSERT_TRUE(s.Write(std::string("\xff\xff\xff garbage")).ok());
  r = s.Read(std::chrono::microseconds(0), deadline());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(static_cast<absl::StatusCode>((*r)[0]), absl::StatusCode::kInvalidArgument) << r->substr(1);
  ASSERT_TRUE(s.Write(StepRequest(8).SerializeAsString()).ok());
  r = s.Read(std::chrono::microseconds(0), deadline());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0], 0);
  // A step the leader refuses (a shutdown from outside) comes back as its error, RunStep's code.
  k3::v1::StepRequest bad = StepRequest(9);
  bad.set_shutdown(true);
  ASSERT_TRUE(s.Write(bad.SerializeAsString()).ok());
  r = s.Read(std::chrono::microseconds(0), deadline());
  ASSERT_TRUE(r.ok()) << r.status();
  grpc::ClientContext ctx;
  const grpc::Status g = stub_->RunStep(&ctx, bad, &resp);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(static_cast<int>((*r)[0]), static_cast<int>(g.error_code())) << r->substr(1) << " / " << g.error_message();
}

TEST_F(LeaderServiceTest, WorkerClientUsesTheChannelAndFallsBackToGrpc) {
  Start(kToken, /*step_channel=*/true);
  coord::WorkerClient client("127.0.0.1:" + std::to_string(port_), {kToken, nullptr});
  const std::chrono::seconds timeout(5);
  EXPECT_FALSE(client.step_channel());
  auto info = client.GetInfo(timeout);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step_port(), static_cast<uint32_t>(step_port_));
  ASSERT_TRUE(client.step_channel()) << "GetInfo advertised the channel: the client should be on it";
  auto r = client.RunStep(StepRequest(1), timeout, std::chrono::microseconds(500));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->entries(0).rows(0).top(0).token(), kVocab - 1);
  // The leader's refusal travels back as itself, and the channel stays up.
  k3::v1::StepRequest bad = StepRequest(9);
  bad.set_shutdown(true);
  r = client.RunStep(bad, timeout);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(client.step_channel());
  // The leader's channel goes away: that step fails UNAVAILABLE, the next goes over gRPC.
  channel_->Stop();
  r = client.RunStep(StepRequest(2), timeout);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_FALSE(client.step_channel());
  r = client.RunStep(StepRequest(3), timeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id(), 3u);
}

}  // namespace
}  // namespace k3::runtime
