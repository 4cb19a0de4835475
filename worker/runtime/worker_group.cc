#include "worker/runtime/worker_group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"
#include "worker/runtime/band_merge.h"

namespace k3::runtime {
namespace {

constexpr int64_t kHeaderBytes = 256;  // int32 status code + the status message, truncated

int64_t RowsOf(const StepEntry& e) { return e.all_positions ? static_cast<int64_t>(e.tokens.size()) : 1; }

int64_t RowBytes(const StepEntry& e, int64_t band_width) {
  return e.top_n * static_cast<int64_t>(sizeof(Candidate)) + 4 + (e.full_logits ? band_width * 4 : 0);
}

absl::Status ApplySequenceChanges(RankEngine& engine, const Step& step) {
  for (SeqId id : step.free) K3_RETURN_IF_ERROR(engine.Free(id));
  for (SeqId id : step.add) K3_RETURN_IF_ERROR(engine.Add(id));
  for (const auto& [src, dst] : step.fork) K3_RETURN_IF_ERROR(engine.Fork(src, dst));
  return absl::OkStatus();
}

// The engine's summaries must fill the message exactly: rows, candidates and band per entry.
absl::Status CheckBands(const Step& step, const std::vector<std::vector<RowOutput>>& bands, int64_t band_width) {
  bool ok = bands.size() == step.entries.size();
  for (size_t i = 0; ok && i < bands.size(); ++i) {
    const StepEntry& e = step.entries[i];
    ok = static_cast<int64_t>(bands[i].size()) == RowsOf(e);
    for (const RowOutput& row : bands[i]) {
      ok = ok && static_cast<int64_t>(row.top.size()) == e.top_n &&
           static_cast<int64_t>(row.logits.size()) == (e.full_logits ? band_width : 0);
    }
  }
  return ok ? absl::OkStatus() : absl::InternalError("the engine's band summaries do not match the step's shape");
}

}  // namespace

int64_t SummaryBytes(const Step& step, int64_t band_width) {
  int64_t n = kHeaderBytes;
  for (const StepEntry& e : step.entries) n += RowsOf(e) * RowBytes(e, band_width);
  return n;
}

absl::StatusOr<Step> WorkerGroup::ReceiveStep(const Step* leader_step) {
  std::string bytes;
  uint64_t size = 0;
  if (leader_step != nullptr) {
    bytes = EncodeStep(*leader_step);
    size = bytes.size();
  }
  K3_RETURN_IF_ERROR(comm_.Broadcast(&size, sizeof(size), 0));
  if (size > (1ull << 31)) return absl::InvalidArgumentError("step message too large");
  bytes.resize(size);
  K3_RETURN_IF_ERROR(comm_.Broadcast(bytes.data(), static_cast<int64_t>(size), 0));
  return DecodeStep(bytes);
}

std::vector<uint8_t> WorkerGroup::RunLocal(const Step& step, absl::Status& status) {
  const int64_t band_width = engine_.vocab_band_width();
  std::vector<uint8_t> msg(SummaryBytes(step, band_width), 0);
  status = ApplySequenceChanges(engine_, step);
  absl::StatusOr<std::vector<std::vector<RowOutput>>> bands;
  if (status.ok() && !step.entries.empty()) {
    bands = engine_.ForwardBands(step.entries);
    status = bands.ok() ? CheckBands(step, *bands, band_width) : bands.status();
  }
  if (status.ok() && !step.entries.empty()) {
    uint8_t* p = msg.data() + kHeaderBytes;
    for (size_t i = 0; i < step.entries.size(); ++i) {
      for (const RowOutput& row : (*bands)[i]) {
        std::memcpy(p, row.top.data(), row.top.size() * sizeof(Candidate));
        p += row.top.size() * sizeof(Candidate);
        std::memcpy(p, &row.logsumexp, 4);
        p += 4;
        if (step.entries[i].full_logits) {
          std::memcpy(p, row.logits.data(), band_width * 4);
          p += band_width * 4;
        }
      }
    }
  }
  const int32_t code = static_cast<int32_t>(status.code());
  std::memcpy(msg.data(), &code, 4);
  const std::string text(status.message());
  std::memcpy(msg.data() + 4, text.data(), std::min<size_t>(text.size(), kHeaderBytes - 5));
  return msg;
}

absl::StatusOr<StepResult> WorkerGroup::LeaderStep(const Step& step) {
  // A step outside DecodeStep's limits (e.g. top_n > kMaxTopN) would fail to decode on every
  // follower, and a follower that cannot decode a step leaves the group: reject it here, before
  // anything is broadcast, so the caller gets the error and the group stays up.
  if (absl::StatusOr<Step> check = DecodeStep(EncodeStep(step)); !check.ok()) return check.status();
  absl::StatusOr<Step> received = ReceiveStep(&step);
  if (!received.ok()) {
    // A broadcast cannot say who is missing; a gather can.
    const int32_t me = comm_.rank();
    std::vector<int32_t> all(comm_.size());
    absl::Status roll = comm_.Gather(&me, all.data(), sizeof(me), 0);
    return absl::Status(received.status().code(),
                        absl::StrCat("step ", step.id, ": ", received.status().message(),
                                     roll.ok() ? "" : absl::StrCat("; roll call: ", roll.message())));
  }
  Step s = std::move(*received);
  absl::Status local;
  std::vector<uint8_t> mine = RunLocal(s, local);
  const int n_ranks = comm_.size();
  const int64_t bytes = static_cast<int64_t>(mine.size());
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
                          absl::StrCat("step ", s.id, ", rank ", r, ": ", std::string(text, strnlen(text, kHeaderBytes - 4))));
    }
  }
  // Merge the bands row by row.
  const int64_t band_width = engine_.vocab_band_width();
  StepResult result;
  result.id = s.id;
  int64_t offset = kHeaderBytes;
  for (const StepEntry& e : s.entries) {
    std::vector<RowOutput> rows;
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
      RowOutput out = MergeBands(tops, lses, e.top_n);
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

absl::Status WorkerGroup::FollowerLoop() {
  while (true) {
    K3_ASSIGN_OR_RETURN(Step s, ReceiveStep(nullptr));
    absl::Status local;
    std::vector<uint8_t> mine = RunLocal(s, local);
    K3_RETURN_IF_ERROR(comm_.Gather(mine.data(), nullptr, static_cast<int64_t>(mine.size()), 0));
    if (s.shutdown) return absl::OkStatus();
  }
}

}  // namespace k3::runtime
