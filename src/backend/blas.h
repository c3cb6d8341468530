// Internal: the CPU backend's BLAS, loaded on first use.
//
// Owns: finding OpenBLAS at run time and choosing its kernels before it initialises. OpenBLAS picks
// its kernels once, when the library is loaded, from a table of CPU models; the 0.3.21 release that
// Debian 12 ships drops to its generic SSE3 kernels ("Prescott") on Intel models newer than that table
// (Raptor Lake, Emerald Rapids, ...): the embedded model's prefill ran 1.5x and its decode 1.3x slower
// on such a CPU (docs/benchmarks.md). Upstream fixed the fallback in 0.3.25. So the backend does not
// link OpenBLAS: the first call here sets OPENBLAS_CORETYPE from the CPU's features on Intel CPUs
// (AVX-512 -> SkylakeX kernels, AVX2 + FMA -> Haswell), unless the user set it, and only then
// dlopen()s the library. Other vendors keep OpenBLAS's own detection.
// Invariant: OpenBLAS is loaded at most once per process, and only through this module.
#pragma once

#include <string>

namespace minimakv::backend::detail {

// y[n][out] = x[n][in] * W[out][in]^T, row-major fp32 (cblas_sgemm); rows of y are ldy apart (ldy >= out,
// 0 meaning out), so a block of W's rows can write its columns of a wider y.
void sgemm_xwt(const float* x, int n, int in, const float* w, int out, float* y, int ldy = 0);

// The kernel set OpenBLAS chose (openblas_get_corename()), e.g. "SkylakeX"; loads the library.
std::string blas_core_name();

}  // namespace minimakv::backend::detail
