# Sourced by the kernel labs (decode-lab.sh, prefill-lab.sh): building a variant of one CUDA source
# against the release library, and running every variant's benchmark.

# lab_build SRC TARGET SOURCE BENCH DIR [nvcc args...]: compiles SOURCE with the CUDA flags of SRC's
# CMake target TARGET plus the extra arguments into DIR, replaces its object in a copy of SRC's
# libminimakv_cuda.a and relinks SRC's benchmark BENCH against that copy into DIR/BENCH. LAB_SRCROOT (default:
# this checkout) is the source tree SOURCE and the headers come from, e.g. a worktree of an earlier commit
# for a "before" variant. LAB_TESTS=1 relinks SRC's cuda_tests into DIR as well.
lab_build() {
  local src=$1 target=$2 source=$3 bench=$4 dir=$5
  shift 5
  local flags defs obj abs root=${LAB_SRCROOT:-.}
  flags=$(sed -n 's/^CUDA_FLAGS = //p' "$src/src/CMakeFiles/$target.dir/flags.make")
  defs=$(sed -n 's/^CUDA_DEFINES = //p' "$src/src/CMakeFiles/$target.dir/flags.make")
  obj=$(basename "$source").o
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  nvcc $flags $defs "$@" -I "$root/include" -isystem /usr/local/cuda/include -c "$root/$source" -o "$dir/$obj"
  cp "$src/src/libminimakv_cuda.a" "$dir/"
  ar r "$dir/libminimakv_cuda.a" "$dir/$obj"
  abs=$(realpath "$dir")
  lab_relink "$src" bench "$bench" "$abs"
  # LAB_TESTS=1: the GPU test binary relinked against the same library, so one run validates the variant.
  [[ ${LAB_TESTS:-0} != 1 ]] || lab_relink "$src" tests cuda_tests "$abs"
}

# lab_relink SRC SUBDIR EXE ABSDIR: SRC's SUBDIR/EXE linked again with ABSDIR's libminimakv_cuda.a in
# place of SRC's, into ABSDIR/EXE.
lab_relink() {
  local src=$1 sub=$2 exe=$3 abs=$4 link
  link=$(cat "$src/$sub/CMakeFiles/$exe.dir/link.txt")
  (cd "$src/$sub" && eval "${link//..\/src\/libminimakv_cuda.a/$abs/libminimakv_cuda.a} -o $abs/$exe.tmp" &&
    mv "$abs/$exe.tmp" "$abs/$exe")
}

# lab_run BENCH LAB OUT [bench args...]: runs LAB/*/BENCH with the arguments and --json OUT/<variant>.json,
# its output in OUT/<variant>.log.
lab_run() {
  local bench=$1 lab=$2 out=$3 dir name
  shift 3
  mkdir -p "$out"
  for dir in "$lab"/*/; do
    name=$(basename "$dir")
    "$dir/$bench" "$@" --json "$out/$name.json" >"$out/$name.log" 2>&1 || echo "$name: rc $? (see $out/$name.log)"
  done
}
