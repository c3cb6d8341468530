# Warnings as errors for our own targets only (third-party headers are included as SYSTEM).
add_library(minimakv_warnings INTERFACE)
target_compile_options(minimakv_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror>
  # Codec bytes must not depend on FMA contraction (docs/formats.md, "Bit-exactness").
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

if(MINIMAKV_SANITIZE)
  string(REPLACE ";" "," _san "${MINIMAKV_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_san}> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_san})
endif()
