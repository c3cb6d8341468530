# Every dependency comes from Debian 12 packages installed by scripts/bootstrap.sh.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)                 # libfmt-dev: formatting of reports
find_package(nlohmann_json 3 REQUIRED)     # nlohmann-json3-dev: --json output, config files
find_package(hwy REQUIRED)                 # libhwy-dev: SIMD with run-time dispatch (attention)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)  # libcli11-dev: the CLI's subcommands
add_library(CLI11::CLI11 INTERFACE IMPORTED)
target_include_directories(CLI11::CLI11 SYSTEM INTERFACE ${CLI11_INCLUDE_DIR})
find_package(prometheus-cpp CONFIG REQUIRED)  # prometheus-cpp-dev: the server's /metrics (core only)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # libcpp-httplib-dev: the HTTP server
if(MINIMAKV_BUILD_TESTS)
  find_package(GTest REQUIRED)             # libgtest-dev
endif()
if(MINIMAKV_BUILD_BENCH)
  find_package(benchmark REQUIRED)         # libbenchmark-dev
endif()
