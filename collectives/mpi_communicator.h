// Collectives over MPI for CPU ranks. Every call is non-blocking underneath and polled against a
// deadline, so a peer that died or stalled yields DeadlineExceeded naming the operation and the
// ranks that did not answer (where the operation can tell), never a hang.
#pragma once

#include <chrono>
#include <memory>

#include <mpi.h>

#include "absl/status/status.h"
#include "collectives/communicator.h"

// Checks an MPI return code; on failure returns an absl error with MPI's message.
#define K3_MPI_CHECK(call)                                                                      \
  do {                                                                                          \
    const int k3_mpi_rc_ = (call);                                                              \
    if (k3_mpi_rc_ != MPI_SUCCESS) return ::k3::coll::MpiError(k3_mpi_rc_, #call);              \
  } while (0)

namespace k3::coll {

absl::Status MpiError(int code, const char* what);

struct MpiOptions {
  std::chrono::milliseconds timeout{60000};  // per collective
};

// comm must outlive the communicator (MPI_COMM_WORLD, or a split of it for one worker group).
std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm, const MpiOptions& options = {});

}  // namespace k3::coll
