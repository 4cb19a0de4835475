#include "coordinator/server/inference_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "coordinator/server/chooser.h"
#include "coordinator/tokenizer/chat_format.h"
#include "spdlog/spdlog.h"

namespace k3::coord {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status Invalid(const std::string& msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg); }

}  // namespace

InferenceService::InferenceService(const model::K3Config& config, const tok::Tokenizer* tokenizer, Router& router,
                                   Metrics& metrics, ServiceLimits limits, std::string auth_token)
    : config_(config),
      tokenizer_(tokenizer),
      router_(router),
      metrics_(metrics),
      limits_(limits),
      auth_(std::move(auth_token)),
      per_client_(limits.max_concurrent_per_client) {}

std::string InferenceService::ClientOf(const grpc::ServerContext& ctx) const {
  // With the shared token every holder is one client (there is one token); the key is not the
  // token itself so that nothing secret sits in the limiter's map.
  if (auth_.enabled()) return "(token holders)";
  return ClientFromPeer(ctx.peer());
}

absl::StatusOr<std::vector<int32_t>> InferenceService::PromptIds(const k3::v1::GenerateRequest& req) const {
  std::vector<int32_t> ids;
  switch (req.input_case()) {
    case k3::v1::GenerateRequest::kTokenIds:
      ids.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      for (int32_t id : ids) {
        if (id < 0 || id >= config_.vocab) {
          return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.vocab, ")"));
        }
      }
      break;
    case k3::v1::GenerateRequest::kText: {
      if (tokenizer_ == nullptr) {
        return absl::FailedPreconditionError("this model has no vocabulary (tokenizer.ggml.model = no_vocab): send token_ids");
      }
      auto enc = tokenizer_->Encode(req.text(), /*allow_special=*/false);
      if (!enc.ok()) return enc.status();
      ids = std::move(*enc);
      break;
    }
    case k3::v1::GenerateRequest::kChat: {
      if (tokenizer_ == nullptr) return absl::FailedPreconditionError("this model has no vocabulary: chat needs one");
      std::vector<tok::ChatMessage> msgs;
      for (const auto& m : req.chat().messages()) msgs.push_back({m.role(), m.content()});
      if (msgs.empty()) return absl::InvalidArgumentError("chat has no messages");
      auto enc = tok::EncodeKimiChat(*tokenizer_, msgs, /*add_generation_prompt=*/true);
      if (!enc.ok()) return enc.status();
      ids = std::move(*enc);
      break;
    }
    default:
      return absl::InvalidArgumentError("the request has no input: set text, token_ids or chat");
  }
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  return ids;
}

grpc::Status InferenceService::Generate(grpc::ServerContext* ctx, const k3::v1::GenerateRequest* req,
                                        grpc::ServerWriter<k3::v1::GenerateResponse>* writer) {
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;
  ++metrics_.requests_total;
  // Held until this handler returns: a finish, an error, a cancel or a disconnect all end it.
  const std::string client = ClientOf(*ctx);
  absl::StatusOr<ClientLimiter::Lease> lease = per_client_.Acquire(client, client);
  if (!lease.ok()) {
    ++metrics_.requests_failed;
    return ToGrpc(lease.status());
  }
  if (req->ByteSizeLong() > limits_.max_request_bytes) {
    ++metrics_.requests_failed;
    return Invalid(absl::StrCat("request of ", req->ByteSizeLong(), " bytes exceeds the limit of ", limits_.max_request_bytes));
  }
  auto ids = PromptIds(*req);
  if (!ids.ok()) {
    ++metrics_.requests_failed;
    return ToGrpc(ids.status());
  }
  const int64_t ctx_len = config_.context_length;
  const int64_t max_prompt = limits_.max_prompt_tokens ? std::min<int64_t>(limits_.max_prompt_tokens, ctx_len - 1) : ctx_len - 1;
  if (static_cast<int64_t>(ids->size()) > max_prompt) {
    ++metrics_.requests_failed;
    return Invalid(absl::StrCat("the prompt has ", ids->size(), " tokens; at most ", max_prompt,
                                " fit (context length ", ctx_len, ")"));
  }
  auto r = std::make_unique<GenerationRequest>();
  r->id = req->request_id().empty() ? absl::StrCat("req-", next_id_++) : req->request_id();
  r->prompt = std::move(*ids);
  const int64_t room = ctx_len - static_cast<int64_t>(r->prompt.size());
  int64_t max_tokens = req->max_tokens() == 0 ? room : req->max_tokens();
  if (limits_.max_tokens) max_tokens = std::min<int64_t>(max_tokens, limits_.max_tokens);
  r->max_tokens = static_cast<uint32_t>(std::min(max_tokens, room));
  r->stop.assign(req->stop().begin(), req->stop().end());
  // Every stop string is scanned on every token: bound how many and how long.
  if (r->stop.size() > limits_.max_stop_strings) {
    ++metrics_.requests_failed;
    return Invalid(absl::StrCat(r->stop.size(), " stop strings; at most ", limits_.max_stop_strings));
  }
  for (const std::string& s : r->stop) {
    if (s.empty() || s.size() > limits_.max_stop_bytes) {
      ++metrics_.requests_failed;
      return Invalid(absl::StrCat("stop strings must be 1 to ", limits_.max_stop_bytes, " bytes long"));
    }
  }
  r->stop_ids.assign(req->stop_token_ids().begin(), req->stop_token_ids().end());
  if (!req->ignore_eos() && config_.eos_id >= 0) r->stop_ids.push_back(static_cast<int32_t>(config_.eos_id));
  if (req->sampling().logprobs() < 0 || req->sampling().logprobs() > limits_.max_logprobs) {
    ++metrics_.requests_failed;
    return Invalid(absl::StrCat("logprobs must be in [0, ", limits_.max_logprobs, "]"));
  }
  r->n_logprobs = req->sampling().logprobs();
  auto chooser = MakeChooser(req->sampling(), r->prompt, config_.vocab);
  if (!chooser.ok()) {
    ++metrics_.requests_failed;
    return ToGrpc(chooser.status());
  }
  r->chooser = std::move(*chooser);
  r->channel = std::make_shared<RequestChannel>();
  std::shared_ptr<RequestChannel> channel = r->channel;
  const std::vector<int32_t> prompt_copy = req->return_prompt_ids() ? r->prompt : std::vector<int32_t>{};
  const std::string id = r->id;
  if (absl::Status s = router_.Submit(r); !s.ok()) {
    ++metrics_.requests_failed;
    return ToGrpc(s);
  }
  bool first = true;
  // The call's deadline (time_point::max() when it has none). The handler ends at it, not at its
  // next poll: the client sees DEADLINE_EXCEEDED on its own timer, and the lease (this client's
  // count) must be back by then, or a request it sends at once is refused over the old count.
  const std::chrono::system_clock::time_point deadline = ctx->deadline();
  while (true) {
    if (ctx->IsCancelled()) {
      channel->Cancel();
      spdlog::info("{}: cancelled by the client", id);
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    }
    const auto now = std::chrono::system_clock::now();
    if (now >= deadline) {
      channel->Cancel();
      spdlog::info("{}: its deadline passed", id);
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed");
    }
    auto wait = std::chrono::milliseconds(50);
    if (deadline - now < wait) wait = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    std::optional<StreamEvent> e = channel->Pop(wait);
    if (!e) continue;
    if (!e->error.ok()) return ToGrpc(e->error);
    if (first) {
      first = false;
      e->response.mutable_prompt_ids()->Assign(prompt_copy.begin(), prompt_copy.end());
      e->response.set_request_id(id);
    }
    if (!writer->Write(e->response)) {
      channel->Cancel();  // the client went away: free the sequence
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client disconnected");
    }
    if (e->final) return grpc::Status::OK;
  }
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* ctx, const k3::v1::TokenizeRequest* req,
                                        k3::v1::TokenizeResponse* resp) {
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;
  if (tokenizer_ == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this model has no vocabulary");
  absl::StatusOr<std::vector<int32_t>> ids;
  if (req->has_chat()) {
    std::vector<tok::ChatMessage> msgs;
    for (const auto& m : req->chat().messages()) msgs.push_back({m.role(), m.content()});
    ids = tok::EncodeKimiChat(*tokenizer_, msgs, req->chat().add_generation_prompt());
  } else {
    ids = tokenizer_->Encode(req->text(), req->allow_special());
  }
  if (!ids.ok()) return ToGrpc(ids.status());
  for (int32_t id : *ids) {
    resp->add_ids(id);
    auto b = tokenizer_->TokenBytes(id);
    resp->add_pieces(b.ok() ? std::string(*b) : "");
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* ctx, const k3::v1::DetokenizeRequest* req,
                                          k3::v1::DetokenizeResponse* resp) {
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;
  if (tokenizer_ == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this model has no vocabulary");
  std::vector<int32_t> ids(req->ids().begin(), req->ids().end());
  auto text = tokenizer_->Decode(ids);
  if (!text.ok()) return ToGrpc(text.status());
  resp->set_text(*text);
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* ctx, const k3::v1::ModelInfoRequest*,
                                            k3::v1::ModelInfo* resp) {
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;
  resp->set_name(config_.name);
  resp->set_architecture("kimi-k3");
  resp->set_n_layers(static_cast<uint32_t>(config_.n_layers));
  resp->set_hidden(static_cast<uint32_t>(config_.hidden));
  resp->set_vocab(static_cast<uint32_t>(config_.vocab));
  resp->set_context_length(static_cast<uint32_t>(config_.context_length));
  resp->set_n_experts(static_cast<uint32_t>(config_.n_experts));
  resp->set_n_experts_used(static_cast<uint32_t>(config_.n_experts_used));
  resp->set_summary(config_.Summary());
  resp->set_worker_groups(static_cast<uint32_t>(router_.groups().size()));
  resp->set_eos_token_id(static_cast<int32_t>(config_.eos_id));
  resp->set_bos_token_id(static_cast<int32_t>(config_.bos_id));
  return grpc::Status::OK;
}

// Open without a token: it tells only whether the service is up (load balancers, k3-launch's
// readiness check and `k3 health` probe it without holding the secret).
grpc::Status InferenceService::Health(grpc::ServerContext*, const k3::v1::HealthRequest*, k3::v1::HealthResponse* resp) {
  const int up = router_.groups_up();
  resp->set_groups_up(up);
  resp->set_groups_total(static_cast<uint32_t>(router_.groups().size()));
  resp->set_status(up > 0 ? k3::v1::HealthResponse::SERVING : k3::v1::HealthResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetStats(grpc::ServerContext* ctx, const k3::v1::StatsRequest*, k3::v1::Stats* resp) {
  if (grpc::Status s = auth_.Check(*ctx); !s.ok()) return s;  // worker addresses and counts
  resp->set_requests_total(metrics_.requests_total);
  resp->set_requests_running(static_cast<uint64_t>(std::max<int64_t>(0, metrics_.running)));
  resp->set_requests_queued(static_cast<uint64_t>(std::max<int64_t>(0, metrics_.queued)));
  resp->set_requests_failed(metrics_.requests_failed);
  resp->set_prompt_tokens_total(metrics_.prompt_tokens);
  resp->set_generated_tokens_total(metrics_.generated_tokens);
  for (const auto& g : router_.groups()) {
    auto* gs = resp->add_groups();
    gs->set_address(g->address());
    gs->set_healthy(g->healthy());
    gs->set_running(static_cast<uint32_t>(std::max<int64_t>(0, g->load())));
    gs->set_steps(g->steps());
    if (auto info = g->info()) {
      gs->set_free_slots(info->free_slots());
      gs->set_free_cache_tokens(info->free_pages() * info->page_size());
    }
  }
  return grpc::Status::OK;
}

}  // namespace k3::coord
