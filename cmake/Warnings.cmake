# Warnings as errors for our own targets only (third-party headers are included as SYSTEM).
add_library(minimakv_warnings INTERFACE)
target_compile_options(minimakv_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror>
  # GCC 12 reports false -Wrestrict positives on std::string concatenation (GCC bug 105651).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
  # Codec bytes must not depend on FMA contraction (docs/formats.md, "Bit-exactness").
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

if(MINIMAKV_SANITIZE)
  string(REPLACE ";" "," _san "${MINIMAKV_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_san}> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_san})
endif()
