#include "worker/engine_cuda/cuda_worker_group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"
#include "worker/runtime/band_merge.h"
#include "worker/runtime/worker_group.h"

namespace k3::engine_cuda {
namespace {

using runtime::Candidate;
using runtime::Step;
using runtime::StepEntry;

// The summary message's layout is runtime::WorkerGroup's: a header (status code + message),
// then per output row its top-n candidates, its band's log-sum-exp and, when asked, the band.
int64_t HeaderBytes() { return runtime::SummaryBytes(Step{}, 0); }
int64_t RowsOf(const StepEntry& e) { return e.all_positions ? static_cast<int64_t>(e.tokens.size()) : 1; }
int64_t RowBytes(const StepEntry& e, int64_t band_width) {
  return e.top_n * static_cast<int64_t>(sizeof(Candidate)) + 4 + (e.full_logits ? band_width * 4 : 0);
}

absl::Status ApplySequenceChanges(CudaEngine& engine, const Step& step) {
  for (runtime::SeqId id : step.free) K3_RETURN_IF_ERROR(engine.Free(id));
  for (runtime::SeqId id : step.add) K3_RETURN_IF_ERROR(engine.Add(id));
  if (!step.fork.empty()) return absl::UnimplementedError("the GPU engine does not fork sequences yet");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Step> CudaWorkerGroup::ReceiveStep(const Step* leader_step) {
  std::string bytes;
  uint64_t size = 0;
  if (leader_step != nullptr) {
    bytes = runtime::EncodeStep(*leader_step);
    size = bytes.size();
  }
  K3_RETURN_IF_ERROR(comm_.Broadcast(&size, sizeof(size), 0));
  if (size > (1ull << 31)) return absl::InvalidArgumentError("step message too large");
  bytes.resize(size);
  K3_RETURN_IF_ERROR(comm_.Broadcast(bytes.data(), static_cast<int64_t>(size), 0));
  return runtime::DecodeStep(bytes);
}

std::vector<uint8_t> CudaWorkerGroup::RunLocal(const Step& step, absl::Status& status) {
  const int64_t band_width = engine_.shard().vocab_width, header = HeaderBytes();
  std::vector<uint8_t> msg(runtime::SummaryBytes(step, band_width), 0);
  status = ApplySequenceChanges(engine_, step);
  absl::StatusOr<ForwardResult> result;
  if (status.ok() && !step.entries.empty()) {
    std::vector<SeqInput> inputs;
    for (const StepEntry& e : step.entries) inputs.push_back({e.seq, e.tokens, e.all_positions});
    result = engine_.Forward(inputs);
    if (!result.ok()) status = result.status();
  }
  if (status.ok() && !step.entries.empty()) {
    uint8_t* p = msg.data() + header;
    for (size_t i = 0; i < step.entries.size(); ++i) {
      const StepEntry& e = step.entries[i];
      for (int64_t row = 0; row < RowsOf(e); ++row) {
        const float* logits = result->row(i, row);
        std::vector<Candidate> top(e.top_n);
        float lse = 0;
        runtime::SummarizeBand(logits, band_width, result->band_begin, e.top_n, top.data(), &lse);
        std::memcpy(p, top.data(), top.size() * sizeof(Candidate));
        p += top.size() * sizeof(Candidate);
        std::memcpy(p, &lse, 4);
        p += 4;
        if (e.full_logits) {
          std::memcpy(p, logits, band_width * 4);
          p += band_width * 4;
        }
      }
    }
  }
  const int32_t code = static_cast<int32_t>(status.code());
  std::memcpy(msg.data(), &code, 4);
  const std::string text(status.message());
  std::memcpy(msg.data() + 4, text.data(), std::min<size_t>(text.size(), header - 5));
  return msg;
}

absl::StatusOr<runtime::StepResult> CudaWorkerGroup::LeaderStep(const Step& step) {
  if (absl::StatusOr<Step> check = runtime::DecodeStep(runtime::EncodeStep(step)); !check.ok()) return check.status();
  K3_ASSIGN_OR_RETURN(Step s, ReceiveStep(&step));
  absl::Status local;
  std::vector<uint8_t> mine = RunLocal(s, local);
  const int n_ranks = comm_.size();
  const int64_t bytes = static_cast<int64_t>(mine.size()), header = HeaderBytes();
  std::vector<uint8_t> all(bytes * n_ranks);
  absl::Status gathered = comm_.Gather(mine.data(), all.data(), bytes, 0);
  if (!gathered.ok()) {
    return absl::Status(gathered.code(), absl::StrCat("step ", s.id, ": ", gathered.message(),
                                                      local.ok() ? "" : absl::StrCat("; leader: ", local.message())));
  }
  for (int r = 0; r < n_ranks; ++r) {
    int32_t code;
    std::memcpy(&code, all.data() + r * bytes, 4);
    if (code != 0) {
      const char* text = reinterpret_cast<const char*>(all.data() + r * bytes + 4);
      return absl::Status(static_cast<absl::StatusCode>(code),
                          absl::StrCat("step ", s.id, ", rank ", r, ": ", std::string(text, strnlen(text, header - 4))));
    }
  }
  const int64_t band_width = engine_.shard().vocab_width;
  runtime::StepResult result;
  result.id = s.id;
  int64_t offset = header;
  for (const StepEntry& e : s.entries) {
    std::vector<runtime::RowOutput> rows;
    for (int64_t row = 0; row < RowsOf(e); ++row) {
      std::vector<const Candidate*> tops(n_ranks);
      std::vector<float> lses(n_ranks);
      std::vector<const float*> bands(n_ranks);
      for (int r = 0; r < n_ranks; ++r) {
        const uint8_t* p = all.data() + r * bytes + offset;
        tops[r] = reinterpret_cast<const Candidate*>(p);
        std::memcpy(&lses[r], p + e.top_n * sizeof(Candidate), 4);
        bands[r] = reinterpret_cast<const float*>(p + e.top_n * sizeof(Candidate) + 4);
      }
      runtime::RowOutput out = runtime::MergeBands(tops, lses, e.top_n);
      if (e.full_logits) {
        out.logits.resize(band_width * n_ranks);
        for (int r = 0; r < n_ranks; ++r) std::memcpy(&out.logits[r * band_width], bands[r], band_width * 4);
      }
      rows.push_back(std::move(out));
      offset += RowBytes(e, band_width);
    }
    result.rows.push_back(std::move(rows));
  }
  return result;
}

absl::Status CudaWorkerGroup::FollowerLoop() {
  while (true) {
    K3_ASSIGN_OR_RETURN(Step s, ReceiveStep(nullptr));
    absl::Status local;
    std::vector<uint8_t> mine = RunLocal(s, local);
    K3_RETURN_IF_ERROR(comm_.Gather(mine.data(), nullptr, static_cast<int64_t>(mine.size()), 0));
    if (s.shutdown) return absl::OkStatus();
  }
}

}  // namespace k3::engine_cuda
