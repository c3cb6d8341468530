// Chained launches: the kernels of a forward pass, launched so that each may start while the kernel
// before it in the stream is still running (programmatic dependent launch, sm_90 and later).
//
// Why: a batch-1 decode step at 8B scale is about 400 kernels, most of them a few microseconds long (norms,
// RoPE, the K/V append, the attention merge). In plain stream order each waits for the one before it to
// finish, drain and flush before its own CTAs are even placed, so the launch latency of every kernel
// adds to the step. A chained kernel's CTAs are placed while its predecessor runs, wait in hardware
// (griddepcontrol.wait) until the predecessor has finished and its writes are visible, and may do
// meanwhile what needs nothing from it (the GEMV prefetches its weights into L2).
//
// Owns: the device-side protocol and the host launch helper (whether launches are chained is
// chained_launch.h's, which host-only code reads too). Invariants, which every kernel launched
// through launch_chained() keeps:
//   - chain_begin() is its first statement, before any early return and before it reads or writes any
//     memory a kernel earlier in the stream writes or reads. (An early return before it could let the
//     kernel finish before its predecessor, and the kernel after it would then run too soon.)
//   - Before chain_begin() it only reads memory nothing in the pass writes (weights).
// chain_begin() waits for the predecessor and then lets the successor be launched, so at most one
// kernel waits beside a running one, and each kernel's predecessor has completed before its successor
// starts. Launched without the attribute (MINIMAKV_CUDA_OVERLAP=0, a GPU before sm_90), both instructions
// are no-ops and the stream orders the kernels as usual. Results never depend on it: only when CTAs are
// placed changes, not what they compute.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "minimakv/cuda/chained_launch.h"
#include "minimakv/cuda/device_memory.h"

namespace minimakv::cuda {

// The first statement of a chained kernel (see above).
__device__ __forceinline__ void chain_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start before the stream's previous kernel
// has finished when chained_launches(). The kernel must keep the invariants above.
template <typename... Params, typename... Args>
void launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                    const char* what, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = chained_launches() ? 1 : 0;
  check(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(std::forward<Args>(args))...), what);
}

}  // namespace minimakv::cuda
