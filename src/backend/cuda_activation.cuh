// The CUDA backend's SwiGLU activation of one element, shared by the elementwise kernel (cuda_ops.cu) and
// the GEMV that fuses it into the gate and up projections (cuda_gemv.cu). Invariant: one definition, so
// that the fused and unfused paths give the same bits.
#pragma once

namespace minimakv::backend {

// silu(gate) * up in fp32.
__device__ inline float swiglu_value(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

}  // namespace minimakv::backend
