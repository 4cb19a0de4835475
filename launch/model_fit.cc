#include "launch/model_fit.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "launch/diagnostics.h"
#include "worker/model/quant_mix.h"
#include "worker/model/tensor_manifest.h"
#include "worker/synth/presets.h"

namespace k3::launch {

absl::StatusOr<ModelShapes> LoadModelShapes(const LaunchConfig& config) {
  const ModelSpec& m = config.model;
  Diagnostics diag(config.file);
  const std::string key = m.synthetic ? "model.synthetic" : "model.path";
  const Loc at = m.where.At(m.synthetic ? "synthetic" : "path");
  ModelShapes shapes;
  if (m.synthetic && !std::filesystem::exists(m.path)) {
    // Not generated yet: the shapes of its preset, the types of its quant mix.
    auto c = synth::PresetConfig(m.synthetic->preset);
    auto mix = model::QuantMix::Preset(m.synthetic->quant);
    if (!c.ok() || !mix.ok()) {
      diag.Error(at, key, std::string(!c.ok() ? c.status().message() : mix.status().message()));
      return diag.ToStatus();
    }
    shapes.config = *c;
    shapes.type_of = [mix = *mix](const model::TensorSpec& s) { return mix.TypeFor(s); };
    shapes.source = absl::StrCat("preset ", m.synthetic->preset, ", quant ", m.synthetic->quant, " (", m.path,
                                 " is generated before the workers start)");
    return shapes;
  }
  auto file = gguf::GgufFile::Open(m.path, /*allow_header_only=*/true);
  if (!file.ok()) {
    diag.Error(at, key, absl::StrCat("cannot open the model: ", file.status().message()));
    return diag.ToStatus();
  }
  auto c = model::ParseK3Config(**file);
  absl::Status manifest = c.ok() ? model::ValidateManifest(*c, **file) : c.status();
  if (!manifest.ok()) {
    diag.Error(at, key, absl::StrCat(m.path, " is not a kimi-k3 model the workers can load: ", manifest.message()));
    return diag.ToStatus();
  }
  shapes.config = *c;
  shapes.file = std::shared_ptr<const gguf::GgufFile>(std::move(*file));
  shapes.type_of = [f = shapes.file](const model::TensorSpec& s) {
    const gguf::TensorInfo* t = f->FindTensor(s.name);
    return t ? t->type : quant::GgmlType::kF32;
  };
  shapes.source = absl::StrCat("header of ", m.path);
  return shapes;
}

model::FitRequest FitRequestFor(const WorkerGroupSpec& g, const model::K3Config& c, const CoordinatorSpec& co) {
  model::FitRequest r;
  r.plan = {g.ranks(), g.expert_groups_or_default()};
  r.n_seqs = g.max_seqs;
  // The worker's cache: cache_tokens over all sequences, by default max_seqs full contexts.
  const int64_t per_seq_default = std::min<int64_t>(c.context_length, int64_t{1} << 20);
  r.context = g.cache_tokens > 0 ? (g.cache_tokens + g.max_seqs - 1) / g.max_seqs : std::max<int64_t>(1, per_seq_default);
  // The worker's forwards are its own --prefill-chunk (the coordinator's steps are split into them).
  r.prefill_chunk = g.prefill_chunk > 0 ? g.prefill_chunk : kWorkerPrefillChunk;
  if (g.gpu_memory_gib > 0) r.device_bytes = static_cast<uint64_t>(g.gpu_memory_gib * static_cast<double>(model::kGiB));
  r.ternary_experts = std::find(g.worker_args.begin(), g.worker_args.end(), "--ternary-experts") != g.worker_args.end();
  return r;
}

absl::StatusOr<std::vector<GroupFit>> CheckGroupsFit(const LaunchConfig& config, const ModelShapes& shapes) {
  Diagnostics diag(config.file);
  std::vector<GroupFit> fits;
  for (size_t i = 0; i < config.groups.size(); ++i) {
    const WorkerGroupSpec& g = config.groups[i];
    const std::string key = absl::StrCat("worker_groups[", i, "] (", g.name, ")");
    const model::FitRequest req = FitRequestFor(g, shapes.config, config.coordinator);
    const std::string asked = absl::StrCat(req.plan.ranks, " ranks, ", req.plan.expert_groups, " expert groups, ",
                                           req.n_seqs, " sequences x ", req.context, " tokens of cache, prefill chunk ",
                                           req.prefill_chunk);
    auto report = model::PlanFit(shapes.config, shapes.type_of, req);
    if (!report.ok()) {
      diag.Error(g.where.self, key, absl::StrCat("the shard plan is refused (", asked, "): ", report.status().message()));
      continue;
    }
    GroupFit fit{g.name, *report, g.backend == Backend::kCuda};
    if (fit.checked_memory) {
      if (absl::Status s = model::RequireFit(*report); !s.ok()) {
        diag.Error(g.where.self, key, absl::StrCat("the fit check refuses the plan (", asked, "): ", s.message()));
        continue;
      }
    }
    fits.push_back(std::move(fit));
  }
  if (!diag.ok()) return diag.ToStatus();
  return fits;
}

}  // namespace k3::launch
