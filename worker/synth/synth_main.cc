// k3-synth: writes a synthetic kimi-k3 GGUF — real shapes, types, metadata and (optionally)
// vocabulary, random well-scaled values — streaming and multi-threaded.
//
//   k3-synth --preset tiny -o tiny.gguf
//   k3-synth --preset slice --layers 2 -o /tmp/slice2.gguf
//   k3-synth --preset full --header-only -o full-header.gguf        (14 shards, seconds)
//   k3-synth --preset small --quant UD-Q2_K_XL --override 'blk.*.ffn_down_exps.weight=Q4_K' -o m.gguf
//   k3-synth --preset small --vocab-from cl100k_base.tiktoken -o m.gguf
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "worker/common/cli_args.h"
#include "worker/common/status_macros.h"
#include "worker/synth/presets.h"
#include "worker/synth/synth_model.h"
#include "worker/synth/synth_writer.h"
#include "worker/synth/tiktoken_vocab.h"

namespace {

constexpr char kUsage[] =
    "usage: k3-synth [--preset tiny|small|tp8|slice|full] -o OUT.gguf [options]\n"
    "  --quant UD-IQ1_S|UD-Q2_K_XL|Q8_0|F32   type mix (default UD-IQ1_S)\n"
    "  --override PATTERN=TYPE                 per-tensor type, glob on the name (repeatable)\n"
    "  --seed N                                values are a function of seed and tensor name\n"
    "  --shards N | --max-shard-gib G          split like gguf-split (full: 14 shards)\n"
    "  --header-only                           headers and tensor tables only (for k3-plan)\n"
    "  --threads N  --chunk-mib M  --quiet     generation threads, chunk size, no progress bar\n"
    "  --no-optional                           omit attn_gate and ffn_routed_norm\n"
    "  --name NAME                             general.name\n"
    "  --vocab-from RANKS [--pre NAME]         real vocabulary from a tiktoken rank file\n"
    "  sizes: --hidden --layers --heads --experts --experts-used --shared-experts --latent\n"
    "         --expert-ffn --dense-ffn --dense-layers --vocab --ctx --res-block --q-lora\n"
    "         --kv-lora --mla-layers 3,7,...\n";

// "-o X" -> "--out X"; every "--override X" collected (CliArgs keeps one value per name).
struct Argv {
  std::vector<std::string> args;
  std::vector<std::string> overrides;
};

Argv Preprocess(int argc, char** argv) {
  Argv a;
  a.args.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "-o") {
      a.args.push_back("--out");
    } else if (s == "--override" && i + 1 < argc) {
      a.overrides.push_back(argv[++i]);
    } else if (s.rfind("--override=", 0) == 0) {
      a.overrides.push_back(s.substr(11));
    } else {
      a.args.push_back(s);
    }
  }
  return a;
}

absl::Status ReadSize(k3::CliArgs& args, const char* name, std::optional<int64_t>* out) {
  if (!args.Has(name)) return absl::OkStatus();
  K3_ASSIGN_OR_RETURN(int64_t v, args.Int(name, 0));
  *out = v;
  return absl::OkStatus();
}

std::string Bytes(uint64_t n) {
  if (n >= (1ull << 30)) return absl::StrFormat("%.2f GiB", n / double(1ull << 30));
  if (n >= (1ull << 20)) return absl::StrFormat("%.2f MiB", n / double(1ull << 20));
  return absl::StrFormat("%.1f KiB", n / 1024.0);
}

std::string Clock(double s) {
  const int t = static_cast<int>(s + 0.5);
  return absl::StrFormat("%d:%02d", t / 60, t % 60);
}

void DrawProgress(const k3::synth::WriteProgress& p) {
  const double frac = p.total ? static_cast<double>(p.done) / p.total : 1.0;
  const double gbps = p.seconds > 0 ? p.done / p.seconds / 1e9 : 0.0;
  const double eta = gbps > 0 ? (p.total - p.done) / 1e9 / gbps : 0.0;
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(frac * kWidth);
  std::fprintf(stderr, "\r[%s%s] %6.2f / %.2f GB  %5.2f GB/s  ETA %s ", std::string(fill, '#').c_str(),
               std::string(kWidth - fill, ' ').c_str(), p.done / 1e9, p.total / 1e9, gbps, Clock(eta).c_str());
  std::fflush(stderr);
}

absl::Status Run(k3::CliArgs& args, const std::vector<std::string>& overrides) {
  using namespace k3::synth;
  const std::string preset = args.Str("preset", "tiny");
  const std::string out = args.Str("out");
  const std::string quant = args.Str("quant", "UD-IQ1_S");
  K3_ASSIGN_OR_RETURN(int64_t seed, args.Int("seed", 1));
  K3_ASSIGN_OR_RETURN(int64_t shards, args.Int("shards", DefaultShards(preset)));
  K3_ASSIGN_OR_RETURN(double shard_gib, args.Double("max-shard-gib", 0));
  const bool header_only = args.Has("header-only");
  const int64_t hw = std::max<int64_t>(2, std::thread::hardware_concurrency());
  K3_ASSIGN_OR_RETURN(int64_t threads, args.Int("threads", hw));
  K3_ASSIGN_OR_RETURN(int64_t chunk_mib, args.Int("chunk-mib", 8));
  const bool quiet = args.Has("quiet");
  const bool no_optional = args.Has("no-optional");
  const std::string name = args.Str("name");
  const std::string vocab_from = args.Str("vocab-from");
  const std::string pre = args.Str("pre");
  SizeOverrides o;
  K3_RETURN_IF_ERROR(ReadSize(args, "hidden", &o.hidden));
  K3_RETURN_IF_ERROR(ReadSize(args, "layers", &o.layers));
  K3_RETURN_IF_ERROR(ReadSize(args, "heads", &o.heads));
  K3_RETURN_IF_ERROR(ReadSize(args, "experts", &o.experts));
  K3_RETURN_IF_ERROR(ReadSize(args, "experts-used", &o.experts_used));
  K3_RETURN_IF_ERROR(ReadSize(args, "shared-experts", &o.shared_experts));
  K3_RETURN_IF_ERROR(ReadSize(args, "latent", &o.latent));
  K3_RETURN_IF_ERROR(ReadSize(args, "expert-ffn", &o.expert_ffn));
  K3_RETURN_IF_ERROR(ReadSize(args, "dense-ffn", &o.dense_ffn));
  K3_RETURN_IF_ERROR(ReadSize(args, "dense-layers", &o.dense_layers));
  K3_RETURN_IF_ERROR(ReadSize(args, "vocab", &o.vocab));
  K3_RETURN_IF_ERROR(ReadSize(args, "ctx", &o.ctx));
  K3_RETURN_IF_ERROR(ReadSize(args, "res-block", &o.res_block));
  K3_RETURN_IF_ERROR(ReadSize(args, "q-lora", &o.q_lora));
  K3_RETURN_IF_ERROR(ReadSize(args, "kv-lora", &o.kv_lora));
  if (args.Has("mla-layers")) {
    std::vector<int64_t> layers;
    for (absl::string_view piece : absl::StrSplit(args.Str("mla-layers"), ',', absl::SkipEmpty())) {
      int64_t il;
      if (!absl::SimpleAtoi(piece, &il)) return absl::InvalidArgumentError("--mla-layers wants 0-based layers like 3,7");
      layers.push_back(il);
    }
    o.mla_layers = layers;
  }
  K3_RETURN_IF_ERROR(args.Finish());
  if (!args.positional().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", args.positional()[0], "'\n", kUsage));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("-o OUT.gguf is required\n", kUsage));
  if (threads < 1 || chunk_mib < 1 || shards < 1 || shard_gib < 0) {
    return absl::InvalidArgumentError("--threads, --chunk-mib and --shards must be >= 1, --max-shard-gib >= 0");
  }

  K3_ASSIGN_OR_RETURN(k3::model::K3Config config, PresetConfig(preset));
  K3_RETURN_IF_ERROR(ApplyOverrides(o, &config));
  config.name = name.empty() ? absl::StrCat("k3-synth-", preset, "-seed", seed) : name;
  std::optional<GgufVocab> vocab;
  if (!vocab_from.empty()) {
    K3_ASSIGN_OR_RETURN(vocab, LoadTiktokenVocab(vocab_from, o.vocab.value_or(0), pre));
    config.vocab = static_cast<int64_t>(vocab->tokens.size());
    std::printf("vocabulary: %s: %ld ranks + specials -> %ld tokens, pre '%s', %zu merges, bos %ld eos %ld pad %ld\n",
                vocab_from.c_str(), static_cast<long>(vocab->n_ranks), static_cast<long>(config.vocab),
                vocab->pre.c_str(), vocab->merges.size(), static_cast<long>(vocab->bos_id),
                static_cast<long>(vocab->eos_id), static_cast<long>(vocab->pad_id));
  } else if (!pre.empty()) {
    return absl::InvalidArgumentError("--pre needs --vocab-from");
  }
  K3_ASSIGN_OR_RETURN(k3::model::QuantMix mix, k3::model::QuantMix::Preset(quant));
  for (const std::string& spec : overrides) K3_RETURN_IF_ERROR(mix.AddOverride(spec));
  SynthOptions so;
  so.seed = static_cast<uint64_t>(seed);
  so.optional_tensors = !no_optional;
  K3_ASSIGN_OR_RETURN(SynthModel model, SynthModel::Create(config, mix, so, std::move(vocab)));

  std::printf("%s\n", model.config().Summary().c_str());
  std::printf("quant mix %s%s, seed %ld, %zu tensors, %s of tensor data%s\n", quant.c_str(),
              overrides.empty() ? "" : absl::StrCat(" + ", overrides.size(), " override(s)").c_str(),
              static_cast<long>(seed), model.tensors().size(), Bytes(model.data_bytes()).c_str(),
              header_only ? " (header only: none written)" : "");
  std::fflush(stdout);

  WriteOptions wo;
  wo.threads = static_cast<int>(threads);
  wo.chunk_bytes = static_cast<uint64_t>(chunk_mib) << 20;
  wo.header_only = header_only;
  wo.shards = static_cast<int>(shards);
  wo.max_shard_bytes = static_cast<uint64_t>(shard_gib * (1ull << 30));
  const bool bar = !quiet && !header_only;
  K3_ASSIGN_OR_RETURN(WriteReport r, WriteModel(model, out, wo, bar ? ProgressFn(DrawProgress) : ProgressFn()));
  if (bar) std::fputc('\n', stderr);

  std::printf("bytes by type:\n");
  for (const auto& [type, n] : r.bytes_by_type) {
    std::printf("  %-8s %14llu  %s\n", std::string(k3::quant::TypeName(type)).c_str(),
                static_cast<unsigned long long>(n), Bytes(n).c_str());
  }
  for (const std::string& p : r.paths) std::printf("wrote %s\n", p.c_str());
  std::printf("%zu file(s), %s on disk in %.2f s", r.paths.size(), Bytes(r.file_bytes).c_str(), r.seconds);
  if (!header_only && r.seconds > 0) {
    std::printf(": %.2f GB/s (%.2f GiB/s) with %ld generator threads", r.data_bytes / r.seconds / 1e9,
                r.data_bytes / r.seconds / (1ull << 30), static_cast<long>(threads));
  }
  std::printf("\n");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Argv a = Preprocess(argc, argv);
  std::vector<char*> ptrs;
  for (std::string& s : a.args) ptrs.push_back(s.data());
  k3::CliArgs args(static_cast<int>(ptrs.size()), ptrs.data());
  if (args.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const absl::Status s = Run(args, a.overrides);
  if (!s.ok()) {
    std::fprintf(stderr, "k3-synth: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
