# Sourced by the GPU scripts: makes the shared libraries of prebuilt binaries findable on a GPU machine
# whose CUDA libraries are not on the loader path (e.g. cuBLAS installed as the nvidia-cublas wheel).
#   BUILD=dir: dir/runtime-libs (scripts/gpu-pack.sh) goes first on LD_LIBRARY_PATH.
if [[ -n "${BUILD:-}" && -d "$BUILD/runtime-libs" ]]; then
  export LD_LIBRARY_PATH="$BUILD/runtime-libs:${LD_LIBRARY_PATH:-}"
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas.so.13 '; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null); do
    if [[ -e "$d/libcublas.so.13" ]]; then
      export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
      break
    fi
  done
fi
