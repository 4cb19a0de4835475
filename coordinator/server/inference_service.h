// k3.v1.Inference: validates requests, turns text and chat into token ids, hands them to the
// router and streams the scheduler's events back. Every request gets an answer: a complete
// stream or a gRPC status a person can act on. With an auth token every RPC but Health must
// carry it (UNAUTHENTICATED otherwise); Generate counts against the client's concurrency limit.
#pragma once

#include <memory>
#include <string>

#include "coordinator/server/client_limiter.h"
#include "coordinator/server/metrics.h"
#include "coordinator/server/router.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "k3/v1/inference.grpc.pb.h"
#include "worker/common/grpc_security.h"
#include "worker/model/k3_config.h"

namespace k3::coord {

struct ServiceLimits {
  uint32_t max_prompt_tokens = 0;    // 0 = the context length
  uint32_t max_tokens = 0;           // cap on max_tokens; 0 = the context length
  size_t max_request_bytes = 4 << 20;
  int32_t max_logprobs = 20;
  size_t max_stop_strings = 16;
  size_t max_stop_bytes = 256;
  int64_t max_concurrent_per_client = 0;  // Generate calls in flight per client; 0 = no limit
};

class InferenceService final : public k3::v1::Inference::Service {
 public:
  // `auth_token`: the shared token clients must send (empty: no authentication).
  InferenceService(const model::K3Config& config, const tok::Tokenizer* tokenizer, Router& router, Metrics& metrics,
                   ServiceLimits limits, std::string auth_token = "");

  grpc::Status Generate(grpc::ServerContext* ctx, const k3::v1::GenerateRequest* req,
                        grpc::ServerWriter<k3::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const k3::v1::TokenizeRequest* req,
                        k3::v1::TokenizeResponse* resp) override;
  grpc::Status Detokenize(grpc::ServerContext* ctx, const k3::v1::DetokenizeRequest* req,
                          k3::v1::DetokenizeResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const k3::v1::ModelInfoRequest* req,
                            k3::v1::ModelInfo* resp) override;
  grpc::Status Health(grpc::ServerContext* ctx, const k3::v1::HealthRequest* req,
                      k3::v1::HealthResponse* resp) override;
  grpc::Status GetStats(grpc::ServerContext* ctx, const k3::v1::StatsRequest* req, k3::v1::Stats* resp) override;

 private:
  // The client a request counts against: the token when auth is on, else the peer's address.
  std::string ClientOf(const grpc::ServerContext& ctx) const;
  // Prompt ids of a request (text, ids or chat), validated against the vocabulary.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const k3::v1::GenerateRequest& req) const;

  const model::K3Config& config_;
  const tok::Tokenizer* tokenizer_;
  Router& router_;
  Metrics& metrics_;
  ServiceLimits limits_;
  security::BearerAuth auth_;
  ClientLimiter per_client_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace k3::coord
