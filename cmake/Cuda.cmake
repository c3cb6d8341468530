# CUDA is optional: with nvcc present (AUTO) the CUDA sources build for Hopper, sm_90 SASS plus
# compute_90 PTX; without it everything else builds and the GPU tests are not registered.
set(MINIMAKV_HAVE_CUDA OFF)
if(NOT MINIMAKV_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)     # -gencode arch=compute_90,code=[sm_90,compute_90]
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's C++20 flag; tell it, so CUDA targets compile as C++20 too.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    find_package(CUDAToolkit REQUIRED)
    set(MINIMAKV_HAVE_CUDA ON)
  elseif(MINIMAKV_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MINIMAKV_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "minimakv: CUDA ${MINIMAKV_HAVE_CUDA}")
