// Hopper's asynchronous hand-off primitives for the prefill CTAs: shared-memory mbarriers, the bulk
// tensor copy engine (TMA) that fills shared memory from a tensor map, register reallocation between
// warpgroups, and a named barrier that also reduces a predicate.
//
// Owns: the PTX of these instructions (device code only).
// Invariants: an mbarrier is initialised by one thread, followed by mbarrier_init_fence() and a CTA
// barrier before any other thread uses it; a phase completes when its expected arrivals have arrived
// and every byte announced with arrive_expect_tx has landed, and a waiter names the parity of the phase
// it waits for (0 for the first, then alternating); a tensor map lives in the kernel's parameter space
// (__grid_constant__), so its generic address is valid for the copy instruction; setmaxnreg is executed by
// every warp of a warpgroup, and the kernel has a register cap at entry (__launch_bounds__(n, 1)).
// Compiled only where __CUDA_ARCH_FEAT_SM90_ALL is defined (the sm_90a target).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace minimakv::cuda::detail {

__device__ inline void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialised barriers visible to the other threads (and to the copy engine).
__device__ inline void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival (release semantics: this thread's earlier shared-memory writes are visible to whoever
// completes a wait on the phase).
__device__ inline void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` the copy engine will deliver to this phase.
__device__ inline void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase of the given parity has completed (acquire semantics). The label is local to
// the braces, so every inlined copy has its own.
__device__ inline void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nMKV_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra MKV_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Copies one box of a rank-4 tensor map at coordinates (c0 innermost .. c3) into shared memory at dst
// (1024-byte aligned for the 128-byte swizzle), completing its bytes on the mbarrier `bar`. Elements
// outside the tensor's extent arrive as zeros (and still count as delivered bytes).
__device__ inline void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                   uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
__device__ inline void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Register reallocation between the warpgroups of a warp-specialised CTA.
template <int N>
__device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// A named barrier over `threads` threads that also returns whether `v` held in every one of them.
__device__ inline bool named_sync_and(int id, int threads, bool v) {
  uint32_t all;
  asm volatile(
      "{\n.reg .pred in, out;\nsetp.ne.u32 in, %1, 0;\nbar.red.and.pred out, %2, %3, in;\nselp.u32 %0, 1, 0, out;\n}\n"
      : "=r"(all)
      : "r"(static_cast<uint32_t>(v)), "r"(id), "r"(threads)
      : "memory");
  return all != 0;
}

// A 16-byte asynchronous copy that writes zeros instead when `valid` is false (src is then not read).
__device__ inline void cp_async16_zfill(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

}  // namespace minimakv::cuda::detail
