// Entry point of the GPU test binary: exits with 77 (ctest SKIP_RETURN_CODE) when no GPU is usable, so
// a machine without a GPU reports these tests as skipped rather than passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "minimakv/cuda/codec_kernels.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (minimakv::cuda::device_count() == 0) {
    std::printf("no CUDA device: GPU tests skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
