// k3-launch's command line. Paths given here are relative to the working directory (paths in
// the config file are relative to the config file's directory).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/supervisor.h"
#include "launch/yaml_overrides.h"

namespace k3::launch {

inline constexpr char kLaunchUsage[] =
    "usage: k3-launch CONFIG.yaml [options]\n"
    "  --dry-run               check everything, print every command and app file, start nothing\n"
    "  --set KEY=VALUE         change one value of the config, e.g. coordinator.listen=127.0.0.1:41000,\n"
    "                          worker_groups.0.listen=... or worker_groups.NAME.max_seqs=4 (repeatable)\n"
    "  --log-dir DIR           instead of logging.dir\n"
    "  --bin-dir DIR           where k3-worker, k3-coordinator, k3-synth and k3 are\n"
    "                          (default: k3-launch's own folder; the same path on every host)\n"
    "  --mpirun PATH           the mpirun to use (default: mpirun from PATH)\n"
    "  --ready-timeout-s S     how long each process may take to say READY (default 600)\n"
    "  --grace-s S             from SIGTERM to SIGKILL when shutting down (default 10)\n"
    "  --serve-for S           serve S seconds, then shut down (default: until SIGINT/SIGTERM)\n"
    "  --smoke-test            once ready, run one request (k3 generate --ids), print it, shut down\n"
    "  --smoke-ids \"1 2 3\"     its prompt token ids (default \"1 2 3 4 5\")\n"
    "  --smoke-tokens N        tokens it generates (default 8)\n"
    "exit codes: 0 ended as asked (signal, --serve-for, smoke test passed); 1 launcher failure;\n"
    "  2 bad command line or config (nothing started); 3 a process failed to start or to say READY;\n"
    "  4 a process died while serving; 5 the smoke-test request failed; 6 processes outlived SIGKILL\n";

struct LaunchArgs {
  std::string config;
  bool dry_run = false;
  bool help = false;
  std::vector<Override> overrides;  // --log-dir becomes one too
  std::string bin_dir;              // empty: the launcher's folder
  std::string mpirun = "mpirun";
  RunOptions run;
};

absl::StatusOr<LaunchArgs> ParseLaunchArgs(const std::vector<std::string>& args);

}  // namespace k3::launch
