// libFuzzer target for request validation: the fuzz input is a serialized k3.v1.GenerateRequest
// (what a client sends over gRPC), parsed as the server would and handed to the very
// InferenceService::Generate the coordinator serves, without a gRPC server: the service's Router
// has no worker groups, so a request that passes every check ends with UNAVAILABLE ("no worker
// group is up") instead of being scheduled. Then, for requests that parse:
//   - MakeChooser (the service's sampler factory) on the request's sampling parameters; when it
//     accepts them, Choose() on a row shaped as the worker would return it (the chooser's
//     top_n candidates or the full logits) must give a token inside the vocabulary;
//   - StopMatcher with the request's stop strings over the prompt's text streamed through the
//     incremental detokenizer, token by token, as the scheduler does: the released text must be
//     a prefix of the stream, and equal a reference computed from the whole text.
// Invariants: no crash; Generate answers INVALID_ARGUMENT, FAILED_PRECONDITION or UNAVAILABLE,
// never OK/INTERNAL/UNKNOWN; what gets past validation has a non-empty prompt inside the
// vocabulary and the context, non-empty stop strings and logprobs in range.
//
//   CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -G Ninja -DK3_FUZZ=ON -DK3_BUILD_TESTS=OFF
//       -DK3_WITH_MPI=OFF -DK3_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   cmake --build build/fuzz --target fuzz_request
//   K3_FUZZ_WRITE_SEEDS=build/fuzz/seeds/request build/fuzz/bin/fuzz_request   # seeds, exits
//   build/fuzz/bin/fuzz_request -max_total_time=30 build/fuzz/corpus/request build/fuzz/seeds/request
// (.ci/fuzz does all of this for every fuzzer.)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include "coordinator/server/chooser.h"
#include "coordinator/server/inference_service.h"
#include "coordinator/server/metrics.h"
#include "coordinator/server/router.h"
#include "coordinator/server/stop_matcher.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/chat_format.h"
#include "coordinator/tokenizer/detokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/vocab.h"
#include "k3/v1/inference.pb.h"
#include "k3/v1/worker.pb.h"
#include "spdlog/spdlog.h"
#include "worker/model/k3_config.h"

namespace {

using k3::coord::StopMatcher;

[[noreturn]] void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_request invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

constexpr int64_t kContext = 96;
constexpr int32_t kMaxLogprobs = 20;

k3::tok::VocabSpec MakeVocab() {
  k3::tok::VocabSpec v;
  v.pre = "kimi-k2";
  auto add = [&](std::string token, k3::tok::TokenType type) {
    v.tokens.push_back(std::move(token));
    v.token_types.push_back(static_cast<int32_t>(type));
  };
  for (int b = 0; b < 256; ++b) {
    add(k3::tok::BytesToGgufToken(std::string(1, static_cast<char>(b))), k3::tok::TokenType::kNormal);
  }
  for (const char* m : {"he", "ll", "llo", "hello", " w", "or", "ld", " world", "st", "op", "stop", "\xE4\xB8",
                        "\xE4\xB8\xAD", "\xF0\x9F", "\xF0\x9F\x98\x80"}) {
    add(k3::tok::BytesToGgufToken(m), k3::tok::TokenType::kNormal);
  }
  add("[PAD]", k3::tok::TokenType::kUnused);
  v.bos_id = static_cast<int32_t>(v.tokens.size());
  for (const char* s : {"[BOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"}) {
    add(s, k3::tok::TokenType::kControl);
  }
  v.eos_id = *v.bos_id + 1;
  return v;
}

struct World {
  k3::tok::Tokenizer tokenizer;
  k3::model::K3Config config;
  k3::coord::Metrics metrics;
  k3::coord::Router router;
  k3::coord::InferenceService service;

  explicit World(k3::tok::Tokenizer t)
      : tokenizer(std::move(t)),
        config(MakeConfig(tokenizer)),
        router(std::vector<std::string>{}, &tokenizer, k3::coord::SchedulerOptions{}, &metrics),
        service(config, &tokenizer, router, metrics, Limits()) {}

  static k3::model::K3Config MakeConfig(const k3::tok::Tokenizer& t) {
    k3::model::K3Config c;
    c.name = "fuzz";
    c.vocab = t.vocab_size();
    c.context_length = kContext;
    c.eos_id = *t.eos_id();
    c.bos_id = *t.bos_id();
    return c;
  }
  static k3::coord::ServiceLimits Limits() {
    k3::coord::ServiceLimits l;
    l.max_request_bytes = 3000;
    l.max_prompt_tokens = 64;
    l.max_tokens = 48;
    l.max_logprobs = kMaxLogprobs;
    return l;
  }
};

World& TheWorld() {
  static World* w = [] {
    auto t = k3::tok::Tokenizer::FromVocab(MakeVocab());
    if (!t.ok()) Fail("vocabulary", std::string(t.status().message()));
    return new World(std::move(*t));
  }();
  return *w;
}

// The prompt as the service would see it (ids in range only), and its text when it has one.
std::vector<int32_t> PromptIds(const World& w, const k3::v1::GenerateRequest& req) {
  std::vector<int32_t> ids;
  if (req.has_token_ids()) {
    for (int32_t id : req.token_ids().ids()) {
      if (id >= 0 && id < w.tokenizer.vocab_size()) ids.push_back(id);
    }
  } else if (req.has_chat()) {
    std::vector<k3::tok::ChatMessage> msgs;
    for (const auto& m : req.chat().messages()) msgs.push_back({m.role(), m.content()});
    if (auto e = k3::tok::EncodeKimiChat(w.tokenizer, msgs, true); e.ok()) ids = std::move(*e);
  } else if (auto e = w.tokenizer.Encode(req.text()); e.ok()) {
    ids = std::move(*e);
  }
  return ids;
}

void CheckGenerate(World& w, const k3::v1::GenerateRequest& req) {
  grpc::ServerContext ctx;
  const grpc::Status s = w.service.Generate(&ctx, &req, /*writer=*/nullptr);
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      if (s.error_message().empty()) Fail("a rejection without a message");
      return;
    case grpc::StatusCode::UNAVAILABLE:
      break;  // passed every check; no worker group to run it
    default:
      Fail("unexpected status from Generate:", std::to_string(s.error_code()) + " " + s.error_message());
  }
  // What got past validation.
  if (req.ByteSizeLong() > 3000) Fail("an oversized request passed");
  if (req.has_token_ids()) {
    if (req.token_ids().ids().empty()) Fail("an empty prompt passed");
    if (req.token_ids().ids_size() > 64) Fail("a prompt over max_prompt_tokens passed");
    for (int32_t id : req.token_ids().ids()) {
      if (id < 0 || id >= w.tokenizer.vocab_size()) Fail("a token id outside the vocabulary passed");
    }
  } else if (!req.has_text() && !req.has_chat()) {
    Fail("a request without input passed");
  }
  for (const std::string& stop : req.stop()) {
    if (stop.empty()) Fail("an empty stop string passed");
  }
  if (req.sampling().logprobs() < 0 || req.sampling().logprobs() > kMaxLogprobs) Fail("logprobs out of range passed");
}

// One row as the worker returns it: distinct logits (no exact ties), the chooser's top_n best
// (descending, ties to the lower id) and the full normalizer; every logit when asked for.
k3::v1::RowOutput MakeRow(const std::vector<float>& logits, int32_t top_n, bool full) {
  k3::v1::RowOutput row;
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double mx = logits[order[0]];
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  row.set_logsumexp(static_cast<float>(mx + std::log(sum)));
  for (int32_t k = 0; k < std::min<int32_t>(top_n, static_cast<int32_t>(logits.size())); ++k) {
    auto* c = row.add_top();
    c->set_token(order[k]);
    c->set_logit(logits[order[k]]);
  }
  if (full) row.mutable_logits()->Assign(logits.begin(), logits.end());
  return row;
}

void CheckChooser(const World& w, const k3::v1::GenerateRequest& req, const std::vector<int32_t>& prompt,
                  const uint8_t* data, size_t size) {
  auto sampling = req.sampling();
  sampling.set_seed(sampling.seed());  // always seeded: runs must be reproducible
  auto chooser = k3::coord::MakeChooser(sampling, prompt, w.config.vocab);
  if (!chooser.ok()) return;
  const int32_t vocab = static_cast<int32_t>(w.config.vocab);
  // Distinct logits: a permutation of a spread of values, shuffled by the input bytes.
  std::vector<float> logits(vocab);
  for (int32_t i = 0; i < vocab; ++i) logits[i] = -8.0f + 0.0625f * static_cast<float>(i);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  for (int32_t i = vocab - 1; i > 0; --i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(logits[i], logits[static_cast<int32_t>((h >> 33) % static_cast<uint64_t>(i + 1))]);
  }
  for (int step = 0; step < 3; ++step) {
    const bool full = (*chooser)->needs_full_logits();
    const int32_t top_n = (*chooser)->top_n();
    if (top_n < 1) Fail("chooser asks for fewer than 1 candidate");
    auto choice = (*chooser)->Choose(MakeRow(logits, top_n, full));
    if (!choice.ok()) {
      Fail("Choose failed on the row it asked for:", std::string(choice.status().message()));
    }
    if (choice->token < 0 || choice->token >= vocab) Fail("Choose picked a token outside the vocabulary");
    if (!(choice->logprob <= 0.0f)) Fail("Choose gave a logprob above 0 or NaN");
    std::rotate(logits.begin(), logits.begin() + 1, logits.end());
  }
}

// StopMatcher over the prompt's text, streamed as the scheduler streams a sequence's output.
void CheckStops(const World& w, const k3::v1::GenerateRequest& req, const std::vector<int32_t>& ids) {
  std::vector<std::string> stops(req.stop().begin(), req.stop().end());
  std::vector<std::string> nonempty;
  for (const std::string& s : stops) {
    if (!s.empty()) nonempty.push_back(s);
  }
  StopMatcher matcher(stops);
  k3::tok::IncrementalDetokenizer detok(w.tokenizer, /*include_special=*/false);
  std::string stream;    // everything the detokenizer produced so far
  std::string released;  // everything the matcher let through
  bool stopped = false;
  std::string want;
  for (int32_t id : ids) {
    auto piece = detok.Feed(id);
    if (!piece.ok()) Fail("the detokenizer rejected a prompt id");
    stream += *piece;
    StopMatcher::Result r = matcher.Feed(*piece);
    released += r.text;
    if (released.size() > stream.size() || stream.compare(0, released.size(), released) != 0) {
      Fail("released text is not a prefix of the stream");
    }
    // Reference: the first feed after which the stream holds a stop string ends the output at
    // the earliest start of any stop string then present.
    size_t cut = std::string::npos;
    for (const std::string& s : nonempty) cut = std::min(cut, stream.find(s));
    if (cut != std::string::npos) {
      want = stream.substr(0, cut);
      if (!r.stopped) Fail("a stop string in the stream was not detected");
      stopped = true;
      break;
    }
    if (r.stopped) Fail("stopped without a stop string in the stream");
  }
  if (!stopped) {
    released += matcher.Flush();
    want = stream;
  }
  if (released != want) Fail("stop matcher output differs from the reference");
}

void WriteSeeds(const char* dir) {
  std::filesystem::create_directories(dir);
  std::vector<k3::v1::GenerateRequest> reqs(6);
  reqs[0].set_text("hello world, stop here");
  reqs[0].add_stop("stop");
  reqs[0].add_stop(" w");
  reqs[0].set_max_tokens(8);
  reqs[1].mutable_token_ids()->add_ids(104);
  reqs[1].mutable_token_ids()->add_ids(256);
  reqs[1].mutable_token_ids()->add_ids(5);
  reqs[1].mutable_sampling()->set_temperature(0.7f);
  reqs[1].mutable_sampling()->set_top_k(5);
  reqs[1].mutable_sampling()->set_top_p(0.9f);
  reqs[1].mutable_sampling()->set_seed(3);
  reqs[1].mutable_sampling()->set_logprobs(3);
  auto* m = reqs[2].mutable_chat()->add_messages();
  m->set_role("system");
  m->set_content("be brief");
  m = reqs[2].mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hello \xE4\xB8\xAD \xF0\x9F\x98\x80");
  reqs[2].mutable_sampling()->set_repetition_penalty(1.3f);
  reqs[2].mutable_sampling()->set_presence_penalty(0.5f);
  reqs[2].mutable_sampling()->set_frequency_penalty(0.5f);
  reqs[2].mutable_sampling()->set_min_p(0.05f);
  reqs[2].add_stop("\xE4\xB8\xAD");
  reqs[3].set_text("x");
  reqs[3].add_stop("");
  reqs[3].mutable_sampling()->set_logprobs(99);
  reqs[4].mutable_token_ids()->add_ids(-1);
  reqs[4].mutable_token_ids()->add_ids(100000);
  reqs[5].set_text(std::string(200, 'a'));
  reqs[5].set_request_id("seed-5");
  reqs[5].set_ignore_eos(true);
  reqs[5].set_return_prompt_ids(true);
  reqs[5].add_stop_token_ids(7);
  int i = 0;
  for (const auto& r : reqs) {
    std::ofstream(std::string(dir) + "/req-" + std::to_string(i++), std::ios::binary) << r.SerializeAsString();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("K3_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  // Quiet: the parser's UTF-8 complaints and the service's per-request logs.
  google::protobuf::SetLogHandler(nullptr);
  spdlog::set_level(spdlog::level::off);
  (void)TheWorld();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  k3::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  World& w = TheWorld();
  CheckGenerate(w, req);
  const std::vector<int32_t> prompt = PromptIds(w, req);
  CheckChooser(w, req, prompt, data, size);
  CheckStops(w, req, prompt);
  return 0;
}
