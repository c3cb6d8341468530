#include "blas.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace minimakv::backend::detail {
namespace {

struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  char* (*corename)() = nullptr;  // openblas_get_corename; absent from other BLAS builds
};

// The kernel set to request from OpenBLAS, or nullptr to leave its own detection alone.
const char* wanted_core() {
  __builtin_cpu_init();
  if (!__builtin_cpu_is("intel")) return nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
constexpr bool kThreadSanitizer = __has_feature(thread_sanitizer);
#else
constexpr bool kThreadSanitizer = false;
#endif

Blas load() {
  if (const char* core = wanted_core()) setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
  // ThreadSanitizer cannot see how OpenBLAS's uninstrumented workers hand results back and reports
  // their writes as races: under it, GEMMs run on the calling thread (our own threads stay checked).
  if (kThreadSanitizer) setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1);
  void* lib = nullptr;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  if (!lib)
    throw std::runtime_error(std::string("CPU backend: cannot load OpenBLAS (libopenblas.so.0): ") + dlerror() +
                             "; install libopenblas0 (scripts/bootstrap.sh does)");
  Blas b;
  b.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(dlsym(lib, "cblas_sgemm"));
  b.corename = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"));
  if (!b.sgemm) throw std::runtime_error("CPU backend: the loaded OpenBLAS has no cblas_sgemm");
  return b;  // the library stays loaded for the life of the process
}

const Blas& blas() {
  static std::once_flag once;
  static Blas b;
  std::call_once(once, [] { b = load(); });
  return b;
}

}  // namespace

void sgemm_xwt(const float* x, int n, int in, const float* w, int out, float* y, int ldy) {
  blas().sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, ldy ? ldy : out);
}

std::string blas_core_name() {
  const Blas& b = blas();
  return b.corename ? std::string(b.corename()) : std::string("unknown");
}

}  // namespace minimakv::backend::detail
