// k3.v1.Inference as a client sees it, through a real gRPC server on loopback (no worker group:
// a request that passes every check ends UNAVAILABLE, "no worker group is up"):
//   - with --auth-token-file, every RPC but Health is UNAUTHENTICATED without the token and gets
//     past the check with it; the test lists every method of the service, so a new RPC fails it
//     until its authentication is decided here;
//   - the stop-string limits (16 strings of 1..256 bytes) are INVALID_ARGUMENT past them.
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "coordinator/server/inference_service.h"
#include "coordinator/server/metrics.h"
#include "coordinator/server/router.h"
#include "k3/v1/inference.grpc.pb.h"
#include "worker/common/grpc_security.h"

namespace k3::coord {
namespace {

constexpr char kToken[] = "test-token-0123456789";

class ServiceTest : public ::testing::Test {
 protected:
  void Start(std::string token, ServiceLimits limits = {}) {
    config_.name = "test";
    config_.vocab = 100;
    config_.context_length = 64;
    config_.eos_id = -1;
    router_ = std::make_unique<Router>(std::vector<std::string>{}, nullptr, SchedulerOptions{}, &metrics_);
    service_ = std::make_unique<InferenceService>(config_, nullptr, *router_, metrics_, limits, std::move(token));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port > 0);
    stub_ = k3::v1::Inference::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // Each RPC of k3.v1.Inference with `token` (none when empty); name -> status.
  std::map<std::string, grpc::Status> CallAll(const std::string& token) {
    std::map<std::string, grpc::Status> out;
    auto ctx = [&] {
      auto c = std::make_unique<grpc::ClientContext>();
      c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      security::AddBearer(*c, token);
      return c;
    };
    {
      k3::v1::GenerateRequest req;
      req.mutable_token_ids()->add_ids(1);
      auto c = ctx();
      auto reader = stub_->Generate(c.get(), req);
      k3::v1::GenerateResponse resp;
      while (reader->Read(&resp)) {
      }
      out["Generate"] = reader->Finish();
    }
    {
      k3::v1::TokenizeRequest req;
      k3::v1::TokenizeResponse resp;
      out["Tokenize"] = stub_->Tokenize(ctx().get(), req, &resp);
    }
    {
      k3::v1::DetokenizeRequest req;
      k3::v1::DetokenizeResponse resp;
      out["Detokenize"] = stub_->Detokenize(ctx().get(), req, &resp);
    }
    {
      k3::v1::ModelInfo resp;
      out["GetModelInfo"] = stub_->GetModelInfo(ctx().get(), k3::v1::ModelInfoRequest(), &resp);
    }
    {
      k3::v1::HealthResponse resp;
      out["Health"] = stub_->Health(ctx().get(), k3::v1::HealthRequest(), &resp);
    }
    {
      k3::v1::Stats resp;
      out["GetStats"] = stub_->GetStats(ctx().get(), k3::v1::StatsRequest(), &resp);
    }
    return out;
  }

  grpc::Status Generate(const k3::v1::GenerateRequest& req, const std::string& token = "") {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    security::AddBearer(c, token);
    auto reader = stub_->Generate(&c, req);
    k3::v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
    }
    return reader->Finish();
  }

  model::K3Config config_;
  Metrics metrics_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<k3::v1::Inference::Stub> stub_;
};

TEST_F(ServiceTest, EveryRpcButHealthWantsTheToken) {
  Start(kToken);
  // Every method of the service is called below: a new one must be added (and its auth decided).
  const auto* service = k3::v1::Inference::service_full_name();
  const auto* desc = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  ASSERT_NE(desc, nullptr);
  const auto without = CallAll("");
  ASSERT_EQ(static_cast<size_t>(desc->method_count()), without.size());
  for (int i = 0; i < desc->method_count(); ++i) {
    const std::string name = desc->method(i)->name();
    ASSERT_TRUE(without.contains(name)) << name << " is not covered by this test";
    if (name == "Health") {
      EXPECT_TRUE(without.at(name).ok()) << "Health stays open: " << without.at(name).error_message();
    } else {
      EXPECT_EQ(without.at(name).error_code(), grpc::StatusCode::UNAUTHENTICATED) << name;
      EXPECT_TRUE(absl::StrContains(without.at(name).error_message(), "authorization: Bearer")) << name;
    }
  }
  for (const auto& [name, s] : CallAll("wrong-token-0123456789")) {
    if (name != "Health") {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name;
    }
  }
  // With the token every call gets past the check (to what the call itself answers).
  const auto with = CallAll(kToken);
  for (const auto& [name, s] : with) {
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name << ": " << s.error_message();
  }
  EXPECT_EQ(with.at("Generate").error_code(), grpc::StatusCode::UNAVAILABLE) << with.at("Generate").error_message();
  EXPECT_TRUE(with.at("GetModelInfo").ok());
  EXPECT_TRUE(with.at("GetStats").ok());
}

TEST_F(ServiceTest, WithoutATokenEverythingIsOpen) {
  Start("");
  for (const auto& [name, s] : CallAll("")) {
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name;
  }
}

TEST_F(ServiceTest, StopStringLimits) {
  Start("");
  k3::v1::GenerateRequest req;
  req.mutable_token_ids()->add_ids(5);
  req.set_max_tokens(4);
  // 16 stop strings of 256 bytes: accepted (and then there is no group to run it).
  for (int i = 0; i < 16; ++i) req.add_stop(std::string(256, static_cast<char>('a' + i)));
  grpc::Status s = Generate(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // A 17th string.
  req.add_stop("q");
  s = Generate(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "17 stop strings; at most 16")) << s.error_message();
  // One string of 257 bytes, and an empty one.
  req.clear_stop();
  req.add_stop(std::string(257, 'x'));
  s = Generate(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "stop strings must be 1 to 256 bytes long")) << s.error_message();
  req.clear_stop();
  req.add_stop("");
  s = Generate(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace k3::coord
