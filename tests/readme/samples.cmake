# Turns every ```cpp block of README.md into a translation unit that tests/CMakeLists.txt
# compiles, so that each sample builds as written.
#
# Convention (README.md, "Code samples"): the first block declares the objects the later ones
# use (`ctl`, `tenant`); it is compiled inside a function body whose parameter `bytes`
# (std::size_t) and the type `Row` stand for the reader's own values. Every later block is
# compiled after the first, in a nested scope of the same body, so it may reuse a name.
# `#include` lines of any block go to file scope. A block that uses an optional component
# (`memcg::jemalloc::`, `memcg::http::`, `memcg::prometheus_cpp::`, `memcg::host::`,
# `memcg::rocksdb::`) is compiled only where that
# component's target is built, linked with it, and given its header (memcg/<component>/...).
# Usage: include() with README (path) and OUT_DIR set; sets README_SAMPLES to a list of
# "<file>|<component or ->" entries.
file(READ "${README}" text)
string(REPLACE ";" "<semicolon>" text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(blocks)
set(in_block FALSE)
set(current "")
foreach(line IN LISTS lines)
  if(NOT in_block AND line STREQUAL "```cpp")
    set(in_block TRUE)
    set(current "")
  elseif(in_block AND line STREQUAL "```")
    set(in_block FALSE)
    list(LENGTH blocks n)
    set(block_${n} "${current}")
    list(APPEND blocks ${n})
  elseif(in_block)
    string(APPEND current "${line}\n")
  endif()
endforeach()
if(in_block)
  message(FATAL_ERROR "README.md: a ```cpp block is not closed")
endif()
list(LENGTH blocks count)
if(count EQUAL 0)
  message(FATAL_ERROR "README.md: no ```cpp block found")
endif()

# Splits a block into its #include lines and its body.
function(split_block block out_includes out_body)
  string(REPLACE "\n" ";" blines "${block}")
  set(inc "")
  set(body "")
  foreach(l IN LISTS blines)
    if(l MATCHES "^#include")
      string(APPEND inc "${l}\n")
    else()
      string(APPEND body "${l}\n")
    endif()
  endforeach()
  set(${out_includes} "${inc}" PARENT_SCOPE)
  set(${out_body} "${body}" PARENT_SCOPE)
endfunction()

split_block("${block_0}" first_includes first_body)
set(prelude "// Generated from README.md by tests/readme/samples.cmake: do not edit.
#include <cstddef>
#include <cstdio>
#include <map>
#include <memory>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>
")
set(README_SAMPLES)
foreach(i IN LISTS blocks)
  split_block("${block_${i}}" includes body)
  set(component "-")
  foreach(c jemalloc http prometheus_cpp host rocksdb)
    if(block_${i} MATCHES "memcg::${c}::" OR block_${i} MATCHES "memcg/${c}/")
      set(component ${c})
    endif()
  endforeach()
  if(component STREQUAL "jemalloc")
    string(PREPEND includes "#include <memcg/jemalloc/arena.hpp>\n")
  elseif(component STREQUAL "http")
    string(PREPEND includes "#include <memcg/http/server.hpp>\n")
  elseif(component STREQUAL "prometheus_cpp")
    string(PREPEND includes "#include <memcg/prometheus_cpp/collector.hpp>\n")
  elseif(component STREQUAL "host")
    string(PREPEND includes "#include <memcg/host/binding.hpp>\n")
  elseif(component STREQUAL "rocksdb")
    string(PREPEND includes "#include <memcg/rocksdb/tenant.hpp>\n")
  endif()
  if(i EQUAL 0)
    set(source "${prelude}${includes}\nstruct Row { int id; };\n\n[[maybe_unused]] void readme_sample_${i}(std::size_t bytes) {\n${body}}\n")
  else()
    set(source "${prelude}${first_includes}${includes}\nstruct Row { int id; };\n\n[[maybe_unused]] void readme_sample_${i}(std::size_t bytes) {\n${first_body}{\n${body}}\n}\n")
  endif()
  string(REPLACE "<semicolon>" ";" source "${source}")
  file(CONFIGURE OUTPUT "${OUT_DIR}/readme_sample_${i}.cpp" CONTENT "${source}" @ONLY)
  list(APPEND README_SAMPLES "${OUT_DIR}/readme_sample_${i}.cpp|${component}")
endforeach()
