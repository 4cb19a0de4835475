// k3-plan: the fit check. For a model (a GGUF file, header-only is enough, or the real K3's
// shapes with a quant mix), a rank plan, a context and a sequence count, prints what each rank
// must hold against the GPU's memory and refuses a plan that does not fit.
//
//   k3-plan --real --quant UD-IQ1_S --ranks 8 --ctx 131072 --seqs 1
//   k3-plan --model model.gguf --ranks 2 --ctx 8192 --seqs 16
//   k3-plan --real --ternary-experts     (the routed experts' IQ1_S rows in the CUDA engine's ternary
//                                         form, k3-worker --ternary-experts: 1.44x their bytes)
#include <cstdio>

#include "worker/common/cli_args.h"
#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/fit_check.h"
#include "worker/model/quant_mix.h"

namespace {

constexpr char kUsage[] =
    "usage: k3-plan (--model FILE.gguf | --real [--quant UD-IQ1_S]) [--ranks N] [--expert-groups G]\n"
    "               [--ctx TOKENS] [--seqs N] [--chunk TOKENS] [--gpu-gib GIB] [--reserve-gib GIB]\n"
    "               [--ternary-experts]\n";

absl::Status Run(k3::CliArgs& args) {
  using namespace k3::model;
  FitRequest req;
  K3_ASSIGN_OR_RETURN(int64_t ranks, args.Int("ranks", 8));
  K3_ASSIGN_OR_RETURN(int64_t groups, args.Int("expert-groups", ranks));
  K3_ASSIGN_OR_RETURN(req.context, args.Int("ctx", 131072));
  K3_ASSIGN_OR_RETURN(req.n_seqs, args.Int("seqs", 1));
  K3_ASSIGN_OR_RETURN(req.prefill_chunk, args.Int("chunk", 4096));
  K3_ASSIGN_OR_RETURN(double gpu_gib, args.Double("gpu-gib", static_cast<double>(kH200Bytes) / kGiB));
  K3_ASSIGN_OR_RETURN(double reserve_gib, args.Double("reserve-gib", 3.0));
  req.plan = RankPlan{static_cast<int>(ranks), static_cast<int>(groups)};
  req.device_bytes = static_cast<uint64_t>(gpu_gib * kGiB);
  req.runtime_reserve = static_cast<uint64_t>(reserve_gib * kGiB);
  const bool real = args.Has("real");
  req.ternary_experts = args.Has("ternary-experts");
  const std::string model_path = args.Str("model");
  const std::string quant = args.Str("quant", "UD-IQ1_S");
  K3_RETURN_IF_ERROR(args.Finish());

  K3Config config;
  TypeOf type_of;
  std::unique_ptr<k3::gguf::GgufFile> file;
  K3_ASSIGN_OR_RETURN(QuantMix mix, QuantMix::Preset(quant));
  if (real == !model_path.empty()) return absl::InvalidArgumentError(std::string("give exactly one of --model, --real\n") + kUsage);
  if (real) {
    config = RealK3Config();
    type_of = [mix](const TensorSpec& s) { return mix.TypeFor(s); };
    std::printf("model: the real Kimi K3 shapes, quant mix %s\n", quant.c_str());
  } else {
    K3_ASSIGN_OR_RETURN(file, k3::gguf::GgufFile::Open(model_path, /*allow_header_only=*/true));
    K3_ASSIGN_OR_RETURN(config, ParseK3Config(*file));
    K3_RETURN_IF_ERROR(ValidateManifest(config, *file));
    const k3::gguf::GgufFile* f = file.get();
    type_of = [f](const TensorSpec& s) {
      const k3::gguf::TensorInfo* t = f->FindTensor(s.name);
      return t ? t->type : k3::quant::GgmlType::kF32;
    };
    std::printf("model: %s\n", model_path.c_str());
  }
  std::printf("%s\n\n", config.Summary().c_str());
  K3_ASSIGN_OR_RETURN(FitReport report, PlanFit(config, type_of, req));
  std::printf("%s", report.Table().c_str());
  K3_RETURN_IF_ERROR(RequireFit(report));
  std::printf("fits: every rank has room\n");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  k3::CliArgs args(argc, argv);
  if (args.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  absl::Status s = Run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "k3-plan: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
