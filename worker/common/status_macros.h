// absl::Status plumbing used at every module boundary.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define K3_CONCAT_INNER(a, b) a##b
#define K3_CONCAT(a, b) K3_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define K3_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::absl::Status k3_status_ = (expr);           \
    if (!k3_status_.ok()) return k3_status_;      \
  } while (0)

// `K3_ASSIGN_OR_RETURN(auto x, MakeX());` : x gets the value, or the error is returned.
#define K3_ASSIGN_OR_RETURN(lhs, rexpr) \
  K3_ASSIGN_OR_RETURN_IMPL(K3_CONCAT(k3_statusor_, __LINE__), lhs, rexpr)
#define K3_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                             \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
