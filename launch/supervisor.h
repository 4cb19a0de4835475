// Runs a launch plan. Writes the log dir and app files, starts every process in order and waits
// for each to say it is READY (for the synthetic model's generation: to end), then serves until
// a signal, the end of --serve-for or of --smoke-test, or the death of any process. Then it ends
// everything: SIGTERM to each process's whole session (clients first, then the coordinator, then
// the worker groups), a grace period, SIGKILL. Ranks an mpirun leaves behind come to the
// launcher (a child subreaper) and are ended too, so no orphan rank remains. Signals are taken
// with sigtimedwait in the one wait loop: no handler, no global flag.
#pragma once

#include <chrono>
#include <string>

#include "launch/command_plan.h"

namespace k3::launch {

// What happened, as the launcher's exit code.
enum ExitCode : int {
  kExitOk = 0,           // ended as asked: a signal, --serve-for elapsed, or the smoke test passed
  kExitInternal = 1,     // the launcher itself failed (log dir, fork)
  kExitBadConfig = 2,    // the command line or the config is wrong: nothing was started
  kExitStartFailed = 3,  // a process exited or did not say READY in time (model generation too)
  kExitChildDied = 4,    // a process died while serving
  kExitSmokeFailed = 5,  // the smoke-test request failed
  kExitLeftovers = 6,    // processes outlived SIGKILL (should never happen)
};

struct RunOptions {
  std::chrono::milliseconds ready_timeout{600'000};  // per process
  std::chrono::milliseconds grace{10'000};           // SIGTERM -> SIGKILL
  std::chrono::milliseconds serve_for{0};            // 0: until a signal
  bool smoke_test = false;
  std::string smoke_ids = "1 2 3 4 5";
  int smoke_tokens = 8;
  std::string bin_dir;  // for the k3 client of the smoke test
};

// Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD so that RunLaunch takes them with sigtimedwait.
// Call first thing in main, before any thread exists (threads inherit the mask).
void BlockLauncherSignals();

ExitCode RunLaunch(const LaunchPlan& plan, const RunOptions& options);

}  // namespace k3::launch
