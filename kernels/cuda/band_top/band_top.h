// The LM head's summary of one vocabulary band on the GPU, per output row: the n best candidates
// (logit descending, ties to the lower id, ids made global by band_begin) and the band's
// logsumexp. The same function as k3::runtime::SummarizeBand (worker/runtime/band_merge.h), so a
// rank downloads n candidates and one float per row instead of its whole band.
//
// Special values:
// - -0 and +0 tie (the CPU compares them equal), the lower id first; the logit returned is the
//   stored one.
// - NaN ranks below -inf and is never returned: while a finite or infinite logit remains it is
//   chosen first, and slots beyond the row's non-NaN logits are padded like a band narrower than
//   n, with {INT32_MAX, -inf} (which the leader's MergeBands drops).
// - logsumexp = max + log(Σ exp(l − max)) over the row: NaN when a logit is NaN or +inf (as the
//   CPU's formula gives), -inf when every logit is -inf (where the CPU's formula gives NaN).
//   Terms are exp'd in f32 and summed in f64: within ~3e-7 (absolute) of the CPU's f64 value.
//
// Two launches. (1) A block per 4096 logits of a row ("chunk"): the chunk's max and Σexp, and the
// best key of each thread's 16 logits (a "group"). (2) A block per row: the chunks' partials give
// the logsumexp; a radix select on the group keys finds the n best groups (they hold the row's n
// best logits: each of the n best groups has a logit at least as good as the n-th best group
// key); a second radix select over those n·16 logits finds the n best, which are sorted. A key is
// (order-preserving bits of the logit) << 32 | (0xFFFFFFFF − column): keys are distinct and
// "larger key" is "better candidate", so the result is exact and deterministic.
// No allocation (the caller passes a workspace), no host synchronization: capturable in a graph.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace k3::cuda {

inline constexpr int32_t kBandTopMaxN = 1024;  // the runtime's kMaxTopN

// One candidate, laid out like k3::runtime::Candidate (8 bytes).
struct BandTopCandidate {
  int32_t token;  // global id: band_begin + column; INT32_MAX for padding
  float logit;    // the stored logit; -inf for padding
};

struct BandTopParams {
  const float* logits;      // [rows][logits_stride] device: the band's logits of each output row
  int64_t logits_stride;    // floats between rows of logits (>= band_width)
  int64_t rows;             // output rows (0..65535)
  int64_t band_width;       // logits per row (>= 1)
  int64_t band_begin;       // global id of column 0 (>= 0, band_begin + band_width <= INT32_MAX)
  int32_t n;                // candidates per row (1..kBandTopMaxN)
  BandTopCandidate* top;    // [rows][n] device: the n best of each row, best first
  float* logsumexp;         // [rows] device: log Σ exp over each row's band
  void* workspace;          // BandTopWorkspaceBytes(rows, band_width, n) bytes, device, 16-byte aligned
  size_t workspace_bytes;   // size of workspace (checked)
};

// Bytes of workspace for a launch with these sizes (n does not change it today).
size_t BandTopWorkspaceBytes(int64_t rows, int64_t band_width, int32_t n);

cudaError_t BandTop(const BandTopParams& p, cudaStream_t stream);

}  // namespace k3::cuda
