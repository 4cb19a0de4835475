// Internal to k3_synth_cuda: the kernel launch behind SynthFillDevice (synth_fill_device.cc
// checks the window and computes the tables; synth_fill_device.cu holds the kernels). Plain C++
// over <cuda_runtime.h>: nvcc sees none of the synth model's headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/ggml_type.h"
#include "worker/synth_cuda/block_gen.h"

namespace k3::synth::detail {

struct SynthFillKernelArgs {
  quant::GgmlType type = quant::GgmlType::kQ8_0;  // gen::SupportsBlockGen
  uint64_t key = 0;
  gen::Window window;
  uint64_t n_blocks = 0;  // output blocks: n_mats * window.n_rows * window.n_col_blocks, > 0
  uint8_t* out = nullptr;  // 2-byte aligned
  gen::BlockGenTables tables{};
};

// Launches the fill (arguments already checked); returns cudaGetLastError() after the launch.
cudaError_t LaunchSynthFillKernel(const SynthFillKernelArgs& a, cudaStream_t stream);

}  // namespace k3::synth::detail
