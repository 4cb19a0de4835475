// A child process in a session of its own, so that it and everything it starts can be found and
// ended together: Open MPI puts each local rank in a process group of its own, but the ranks
// stay in mpirun's session. Output (stdout and stderr) goes to the command's log file.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/command_plan.h"

namespace k3::launch {

class ChildProcess {
 public:
  // Forks and execs `command`; an exec failure (no such program) is this call's error.
  static absl::StatusOr<ChildProcess> Start(const Command& command);

  const std::string& name() const { return name_; }
  const std::string& log() const { return log_; }
  pid_t pid() const { return pid_; }  // also its session and process group id

  // Sends `sig` to every live process of the session; returns how many got it.
  int Signal(int sig) const;
  // Any process of the session alive (zombies waiting to be reaped do not count).
  bool SessionAlive() const;

 private:
  std::string name_, log_;
  pid_t pid_ = -1;
};

// Live processes whose session is `sid`, from /proc.
std::vector<pid_t> SessionMembers(pid_t sid);
// Live children of `parent`: with the launcher a child subreaper, the ranks an mpirun leaves
// behind when it dies become the launcher's children.
std::vector<pid_t> ChildrenOf(pid_t parent);

}  // namespace k3::launch
