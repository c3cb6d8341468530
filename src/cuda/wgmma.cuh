// Hopper warpgroup MMA (wgmma, sm_90a) for the prefill attention: shared-memory matrix descriptors,
// the fence / commit / wait protocol and the few instruction shapes the prefill CTAs issue, with fp16
// or bf16 operands (T = __half or __nv_bfloat16), or E4M3 ones for QK^T over FP8 pages, and fp32
// accumulators.
//
// Owns: the PTX of these instructions. Operands in shared memory use one of two canonical layouts:
// without swizzle, 8 x 8 "core matrices" of 8 rows of 16 contiguous bytes, the descriptor naming the
// byte distance between core matrices adjacent along K (leading, LBO) and along M or N (stride, SBO);
// or the 128-byte swizzle the bulk tensor copy engine writes (gmma_desc_sw128): rows of 128 bytes whose
// 16-byte chunks are permuted by XOR with the row's index mod 8, in atoms of 8 rows (1024 bytes).
// Invariants: a warpgroup issues these with all 128 threads converged; accumulator and A registers are
// not touched between an mma_async and the wait_group that retires it, and wgmma_fence() precedes every
// batch whose registers other instructions wrote; shared memory written by ordinary stores is made
// visible to the tensor cores with fence.proxy.async by each writing thread before the barrier that
// hands it over; a swizzled operand's atoms start at 1024-byte aligned addresses. Compiled only where
// __CUDA_ARCH_FEAT_SM90_ALL is defined (the sm_90a target).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace minimakv::cuda::detail {

// A shared-memory matrix descriptor for the canonical no-swizzle layout.
__device__ inline uint64_t gmma_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>(lbo_bytes >> 4) << 16) |
         (static_cast<uint64_t>(sbo_bytes >> 4) << 32);
}
// The same for the 128-byte swizzle (layout type 1 in bits 62-63; base offset 0, so atoms are 1024-byte
// aligned). K-major: SBO is the distance between 8-row groups and LBO is unused (a k16 step stays inside
// a 128-byte row; the start address moves 32 bytes per step). MN-major: LBO is the distance between
// blocks of 64 elements along M or N, SBO the distance between groups of 8 rows along K.
__device__ inline uint64_t gmma_desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return gmma_desc(smem_addr, lbo_bytes, sbo_bytes) | (1ull << 62);
}
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

template <class T>
inline constexpr bool kBf16Operands = std::is_same_v<T, __nv_bfloat16>;

// The operand lists of the instructions below: accumulator placeholders and constraints.
#define MKV_WGMMA_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define MKV_WGMMA_REGS32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MKV_WGMMA_REGS64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MKV_WGMMA_REGS128 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MKV_WGMMA_ACC16(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define MKV_WGMMA_ACC32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MKV_WGMMA_ACC64(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MKV_WGMMA_ACC128(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d (+)= A B with A 64 x 16 and B 16 x N both from shared memory (descriptors a and b; trans-a and
// trans-b 0: both K-major); accumulate == 0 overwrites d. IA, IB, IP: the operand numbers after the
// accumulators.
#define MKV_WGMMA_SS(SHAPE, TY, REGS, IA, IB, IP)                                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" \
  REGS "}, %" IA ", %" IB ", p, 1, 1, 0, 0;\n}\n"
// d += A B with A 64 x 16 from registers (each warp's 16 rows as the m16n8k16 A fragment) and B 16 x N
// from shared memory stored MN-major (trans-b 1).
#define MKV_WGMMA_RS(SHAPE, TY, REGS, I0, I1, I2, I3, IB, IP)                                                \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" \
  REGS "}, {%" I0 ", %" I1 ", %" I2 ", %" I3 "}, %" IB ", p, 1, 1, 1;\n}\n"

// d (+)= A B with E4M3 operands, A 64 x 32 and B 32 x N both from shared memory, K-major (8-bit
// operands have no transposed form). A k32 step is 32 bytes of a row, as a k16 step of 16-bit operands,
// so the descriptors are the same.
#define MKV_WGMMA_SS_E4M3(SHAPE, REGS, IA, IB, IP)                                                 \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32.e4m3.e4m3 {" REGS \
  "}, %" IA ", %" IB ", p, 1, 1;\n}\n"

template <int N>
__device__ inline void wgmma_ss_e4m3(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 32 || N == 64 || N == 128);
  if constexpr (N == 32)
    asm volatile(MKV_WGMMA_SS_E4M3("m64n32k32", MKV_WGMMA_REGS16, "16", "17", "18")
                 : MKV_WGMMA_ACC16(d) : "l"(a), "l"(b), "r"(accumulate));
  else if constexpr (N == 64)
    asm volatile(MKV_WGMMA_SS_E4M3("m64n64k32", MKV_WGMMA_REGS32, "32", "33", "34")
                 : MKV_WGMMA_ACC32(d) : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile(MKV_WGMMA_SS_E4M3("m64n128k32", MKV_WGMMA_REGS64, "64", "65", "66")
                 : MKV_WGMMA_ACC64(d) : "l"(a), "l"(b), "r"(accumulate));
}

template <class T>
__device__ inline void wgmma_ss_n32(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (kBf16Operands<T>)
    asm volatile(MKV_WGMMA_SS("m64n32k16", "bf16", MKV_WGMMA_REGS16, "16", "17", "18")
                 : MKV_WGMMA_ACC16(d) : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile(MKV_WGMMA_SS("m64n32k16", "f16", MKV_WGMMA_REGS16, "16", "17", "18")
                 : MKV_WGMMA_ACC16(d) : "l"(a), "l"(b), "r"(accumulate));
}
template <class T>
__device__ inline void wgmma_ss_n64(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (kBf16Operands<T>)
    asm volatile(MKV_WGMMA_SS("m64n64k16", "bf16", MKV_WGMMA_REGS32, "32", "33", "34")
                 : MKV_WGMMA_ACC32(d) : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile(MKV_WGMMA_SS("m64n64k16", "f16", MKV_WGMMA_REGS32, "32", "33", "34")
                 : MKV_WGMMA_ACC32(d) : "l"(a), "l"(b), "r"(accumulate));
}
template <class T>
__device__ inline void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (kBf16Operands<T>)
    asm volatile(MKV_WGMMA_SS("m64n128k16", "bf16", MKV_WGMMA_REGS64, "64", "65", "66")
                 : MKV_WGMMA_ACC64(d) : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile(MKV_WGMMA_SS("m64n128k16", "f16", MKV_WGMMA_REGS64, "64", "65", "66")
                 : MKV_WGMMA_ACC64(d) : "l"(a), "l"(b), "r"(accumulate));
}

template <class T>
__device__ inline void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kBf16Operands<T>)
    asm volatile(MKV_WGMMA_RS("m64n64k16", "bf16", MKV_WGMMA_REGS32, "32", "33", "34", "35", "36", "37")
                 : MKV_WGMMA_ACC32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile(MKV_WGMMA_RS("m64n64k16", "f16", MKV_WGMMA_REGS32, "32", "33", "34", "35", "36", "37")
                 : MKV_WGMMA_ACC32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <class T>
__device__ inline void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kBf16Operands<T>)
    asm volatile(MKV_WGMMA_RS("m64n128k16", "bf16", MKV_WGMMA_REGS64, "64", "65", "66", "67", "68", "69")
                 : MKV_WGMMA_ACC64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile(MKV_WGMMA_RS("m64n128k16", "f16", MKV_WGMMA_REGS64, "64", "65", "66", "67", "68", "69")
                 : MKV_WGMMA_ACC64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <class T>
__device__ inline void wgmma_rs_n256(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kBf16Operands<T>)
    asm volatile(MKV_WGMMA_RS("m64n256k16", "bf16", MKV_WGMMA_REGS128, "128", "129", "130", "131", "132", "133")
                 : MKV_WGMMA_ACC128(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile(MKV_WGMMA_RS("m64n256k16", "f16", MKV_WGMMA_REGS128, "128", "129", "130", "131", "132", "133")
                 : MKV_WGMMA_ACC128(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d (+)= A B over N = 32, 64 or 128 columns of B (the QK^T shapes), and d += A B over N = 64, 128 or 256
// (the PV shapes).
template <class T, int N>
__device__ inline void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 32 || N == 64 || N == 128);
  if constexpr (N == 32)
    wgmma_ss_n32<T>(d, a, b, accumulate);
  else if constexpr (N == 64)
    wgmma_ss_n64<T>(d, a, b, accumulate);
  else
    wgmma_ss_n128<T>(d, a, b, accumulate);
}
template <class T, int N>
__device__ inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(N == 64 || N == 128 || N == 256);
  if constexpr (N == 64)
    wgmma_rs_n64<T>(d, a, b);
  else if constexpr (N == 128)
    wgmma_rs_n128<T>(d, a, b);
  else
    wgmma_rs_n256<T>(d, a, b);
}

}  // namespace minimakv::cuda::detail
