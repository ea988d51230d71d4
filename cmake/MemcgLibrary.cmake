# memcg_library(NAME SOURCES...): one of memcg's libraries, static or shared (MEMCG_SHARED).
#
# Shared: the SONAME carries the version's ABI part (libmemcg.so.0.1 while the major version is
# 0, since 0.x releases may change the ABI at each minor version; libmemcg.so.N from 1.0), and
# the linker version script memcg.map exports the memcg namespace only, so that what else the
# library's objects define (instantiations of standard templates, helpers) stays inside it. The
# hot path is unaffected: it is inline in the headers, compiled into the caller either way.
#
# memcg_shared_library(NAME FROM STATIC): the shared object libmemcg.so.<SOVERSION> made of the
# whole static library STATIC, for the languages that load memcg at run time (Python's ctypes,
# Rust and Go through the C API) while C++ users keep the static library: the same SONAME,
# version script and checks as a shared memcg_library(), no second compilation of the sources.
#
# memcg_install_library(NAME EXPORT SET): NAME's install rules in SET (memcgTargets, or a
# component's own set whose dependency memcgConfig.cmake looks for first): the shared object
# in `runtime`, the archive and the link-time symlink in `development`.
set(MEMCG_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/memcg.map)
if(memcg_VERSION_MAJOR EQUAL 0)
  set(MEMCG_SOVERSION ${memcg_VERSION_MAJOR}.${memcg_VERSION_MINOR})
else()
  set(MEMCG_SOVERSION ${memcg_VERSION_MAJOR})
endif()

function(memcg_library name)
  if(MEMCG_SHARED)
    add_library(${name} SHARED ${ARGN})
    set_target_properties(${name} PROPERTIES VERSION ${memcg_VERSION} SOVERSION ${MEMCG_SOVERSION})
    target_link_options(${name} PRIVATE "LINKER:--version-script=${MEMCG_VERSION_SCRIPT}")
    if(NOT MEMCG_SANITIZE)  # the sanitizer runtimes are resolved in the program, not here
      target_link_options(${name} PRIVATE "LINKER:--no-undefined")
    endif()
    set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS ${MEMCG_VERSION_SCRIPT})
  else()
    add_library(${name} STATIC ${ARGN})
  endif()
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  set_property(GLOBAL APPEND PROPERTY MEMCG_LIBRARY_TARGETS ${name})
endfunction()

function(memcg_shared_library name)
  cmake_parse_arguments(arg "" "FROM" "" ${ARGN})
  # Nothing of its own: a target needs a source file.
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cpp
       CONTENT "// ${name}: the whole of ${arg_FROM} as a shared object (cmake/MemcgLibrary.cmake)\n")
  add_library(${name} SHARED ${CMAKE_CURRENT_BINARY_DIR}/${name}.cpp)
  target_link_libraries(${name} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${arg_FROM}>")
  set_target_properties(${name} PROPERTIES OUTPUT_NAME ${arg_FROM} VERSION ${memcg_VERSION}
                                           SOVERSION ${MEMCG_SOVERSION})
  target_link_options(${name} PRIVATE "LINKER:--version-script=${MEMCG_VERSION_SCRIPT}")
  if(NOT MEMCG_SANITIZE)
    target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  endif()
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS ${MEMCG_VERSION_SCRIPT})
  set_property(GLOBAL APPEND PROPERTY MEMCG_LIBRARY_TARGETS ${name})
endfunction()

function(memcg_install_library name)
  cmake_parse_arguments(arg "" "EXPORT" "" ${ARGN})
  if(NOT MEMCG_INSTALL)
    return()
  endif()
  install(TARGETS ${name} EXPORT ${arg_EXPORT}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development)
  get_property(done GLOBAL PROPERTY MEMCG_EXPORT_SETS)
  if(NOT arg_EXPORT IN_LIST done)
    set_property(GLOBAL APPEND PROPERTY MEMCG_EXPORT_SETS ${arg_EXPORT})
    install(EXPORT ${arg_EXPORT} NAMESPACE memcg:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memcg
            COMPONENT development)
  endif()
endfunction()
