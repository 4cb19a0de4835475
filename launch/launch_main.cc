// k3-launch: starts a whole K3 deployment from one YAML file (launch/configs/*.yaml): the
// synthetic model if it is missing, every worker group under mpirun, the coordinator. Checks
// everything first (keys, types, placements, the fit of each group on its GPUs); --dry-run
// prints the exact commands and app files and starts nothing. Ends everything it started on
// SIGINT/SIGTERM or when any process dies.
//
//   k3-launch launch/configs/cpu-only.yaml --dry-run
//   k3-launch launch/configs/cpu-only.yaml --smoke-test
//   k3-launch launch/configs/h200x8-one-node.yaml
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "launch/command_plan.h"
#include "launch/config_check.h"
#include "launch/config_parser.h"
#include "launch/launch_args.h"
#include "launch/model_fit.h"
#include "launch/plan_text.h"
#include "launch/supervisor.h"

namespace {

using namespace k3::launch;

std::string OwnDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

int Fail(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "k3-launch: %s:\n%s\n", what, std::string(s.message()).c_str());
  return kExitBadConfig;
}

std::string FitText(const std::vector<GroupFit>& fits) {
  std::string s;
  for (const GroupFit& f : fits) {
    absl::StrAppend(&s, "# fit check of group ", f.group,
                    f.checked_memory ? " (every rank fits its GPU):\n" : " (cpu: the shard plan divides):\n");
    absl::StrAppend(&s, "#   ", absl::StrReplaceAll(f.report.Table(), {{"\n", "\n#   "}}));
    s.erase(s.find_last_not_of(" #") + 1);
    s += "\n";
  }
  return s;
}

int Main(int argc, char** argv) {
  auto args = ParseLaunchArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    std::fprintf(stderr, "k3-launch: %s\n%s", std::string(args.status().message()).c_str(), kLaunchUsage);
    return kExitBadConfig;
  }
  if (args->help) {
    std::fputs(kLaunchUsage, stdout);
    return kExitOk;
  }
  auto config = ReadLaunchConfig(args->config, args->overrides);
  if (!config.ok()) return Fail(config.status(), "the config is invalid");
  if (absl::Status s = CheckLaunchConfig(*config); !s.ok()) return Fail(s, "the config is invalid");
  auto shapes = LoadModelShapes(*config);
  if (!shapes.ok()) return Fail(shapes.status(), "the model cannot be used");
  auto fits = CheckGroupsFit(*config, *shapes);
  if (!fits.ok()) return Fail(fits.status(), "the plan does not fit");

  PlanOptions po;
  po.bin_dir = args->bin_dir.empty() ? OwnDir() : args->bin_dir;
  po.mpirun = args->mpirun;
  po.generate_model = config->model.synthetic && !std::filesystem::exists(config->model.path);
  auto plan = BuildLaunchPlan(*config, po);
  if (!plan.ok()) return Fail(plan.status(), "cannot build the commands");
  const std::string text = absl::StrCat("# model shapes from the ", shapes->source, "\n", FitText(*fits), DescribePlan(*plan));
  if (args->dry_run) {
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }
  std::fputs(text.c_str(), stderr);
  RunOptions run = args->run;
  run.bin_dir = po.bin_dir;
  return RunLaunch(*plan, run);
}

}  // namespace

int main(int argc, char** argv) {
  BlockLauncherSignals();  // before anything: every signal is taken by the wait loop
  return Main(argc, argv);
}
