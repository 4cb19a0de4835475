// The exact commands of a launch, built from a checked config: k3-synth (when the synthetic
// model is absent), one mpirun per worker group with an app-context file (mpirun --app), and
// the coordinator. The app file has one line per rank because mpirun's -x and an `env` prefix
// on the command line are the same for every rank: a line of its own gives each rank its own
// CUDA_VISIBLE_DEVICES, NUMA binding and profiler with its own output file
// (<log dir>/<group>-rank<r>.<ext>). Pure: nothing is written or started here, so a dry run
// and the tests see exactly what a launch runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/launch_config.h"

namespace k3::launch {

struct Command {
  std::string name;  // "synth", the group's name, "coordinator", "smoke"
  std::vector<std::string> argv;
  EnvList env;        // added to the launcher's environment
  std::string log;    // stdout and stderr go here
  std::string ready;  // the line that says it serves; empty for a job that runs to its end
};

struct GroupLaunch {
  Command mpirun;
  std::string app_file;  // where the app file goes (the log dir)
  std::string app_text;  // its contents
  std::string dial;      // the address the coordinator dials
  int ranks = 0;
};

struct LaunchPlan {
  std::string config_file;
  std::string log_dir;
  std::string model;
  std::optional<Command> synth;  // run first, to its end, when the synthetic model is absent
  std::vector<GroupLaunch> groups;
  Command coordinator;
  std::string coordinator_dial;  // where clients reach the coordinator
  std::string client_token_file;  // what the smoke test's client sends (coordinator.auth_token_file)
  std::string client_tls_ca;      // what it trusts (coordinator.tls_ca); empty: plaintext
};

struct PlanOptions {
  std::string bin_dir;          // k3-worker, k3-coordinator, k3-synth and k3 (the same path on every host)
  bool generate_model = false;  // the synthetic model's file is absent
  std::string mpirun = "mpirun";
};

absl::StatusOr<LaunchPlan> BuildLaunchPlan(const LaunchConfig& config, const PlanOptions& options);

// The client commands of --smoke-test: health until it answers, then one generation.
Command HealthCommand(const LaunchPlan& plan, const std::string& bin_dir);
Command GenerateCommand(const LaunchPlan& plan, const std::string& bin_dir, const std::string& ids, int max_tokens);

}  // namespace k3::launch
