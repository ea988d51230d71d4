# Install rules in three components, and the Debian packages made of them (cpack -G DEB):
#
#   runtime      the shared libraries (libmemcg.so.<SOVERSION> also in the static build, for
#                the C API's users: ctypes, Rust, Go)      -> libmemcg<SOVERSION> (e.g. libmemcg0.1)
#   development  headers (the C API's memcg/c/memcg.h too), archives or .so links, CMake
#                package, pkg-config (memcg.pc, memcg-c.pc)      -> libmemcg-dev
#   tools        memcgctl                                   -> memcg-tools
#   python       the Python package memcg (bindings/python) -> python3-memcg
#   The Prometheus rules and the Grafana dashboard (contrib/prometheus, docs/operations.md) go
#   with the development files, to share/memcg/prometheus.
#
# `cmake --install B --component X` installs one of them alone. Every library install rule is
# memcg_install_library()'s (cmake/MemcgLibrary.cmake); memcgctl's is optional, so installing
# after building only the libraries (target memcg_libraries) works.
memcg_install_library(memcg EXPORT memcgTargets)
# The static build's libmemcg.so.<SOVERSION>, with its link-time symlink libmemcg.so among the
# development files: `-lmemcg` from memcg-c.pc (Rust's memcg-sys, cgo, C) then links the shared
# object, which carries the C++ runtime. C++ users keep the static library: the CMake package
# names the archive's path, memcg.pc asks for it by file name (-l:libmemcg.a).
if(TARGET memcg_shared AND NOT MEMCG_SHARED)
  install(TARGETS memcg_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
          NAMELINK_COMPONENT development)
endif()
# The Python package: pure Python over ctypes, in Debian's directory for it under /usr; under
# another prefix where CPython looks in a prefix, lib/python3.<minor>/site-packages of the
# interpreter found (a venv's pip install of bindings/python is the other way: its README).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(MEMCG_PYTHON_DIR lib/python3/dist-packages)
else()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    set(MEMCG_PYTHON_DIR lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/site-packages)
  else()
    set(MEMCG_PYTHON_DIR lib/python3/site-packages)
  endif()
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/python/memcg DESTINATION ${MEMCG_PYTHON_DIR}
        COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "py.typed"
        PATTERN "__pycache__" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/memcg DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT development)
install(FILES ${PROJECT_BINARY_DIR}/include/memcg/base/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memcg/base COMPONENT development)
install(FILES ${PROJECT_SOURCE_DIR}/contrib/prometheus/memcg-rules.yml
              ${PROJECT_SOURCE_DIR}/contrib/prometheus/memcg-rules.test.yml
              ${PROJECT_SOURCE_DIR}/contrib/prometheus/memcg-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/memcg/prometheus COMPONENT development)
# The optional components built here, for memcgConfig.cmake's messages about the others.
set(MEMCG_BUILT_COMPONENTS)
foreach(component rocksdb rocksdb_arena jemalloc http hook host prometheus_cpp sqlite)
  if(TARGET memcg_${component})
    list(APPEND MEMCG_BUILT_COMPONENTS ${component})
  endif()
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/memcgConfig.cmake.in
  ${PROJECT_BINARY_DIR}/memcgConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memcg)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memcgConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memcgConfig.cmake ${PROJECT_BINARY_DIR}/memcgConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memcg COMPONENT development)
# memcg.pc finds the prefix from where it is installed: as many `..` as the library directory
# has parts (lib, or lib/x86_64-linux-gnu under /usr).
file(RELATIVE_PATH MEMCG_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
if(MEMCG_SHARED)
  set(MEMCG_PC_LIB "-lmemcg")
else()
  set(MEMCG_PC_LIB "-l:libmemcg.a")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/memcg.pc.in ${PROJECT_BINARY_DIR}/memcg.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memcg.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT development)
# memcg-c.pc: the C API (include/memcg/c/memcg.h) for C, cgo and Rust -sys crates. A static
# libmemcg.a needs the C++ runtime on the link line of a C program; the shared one carries it.
if(MEMCG_SHARED)
  set(MEMCG_C_PC_LIBS "")
  set(MEMCG_C_PC_LIBS_PRIVATE "-lstdc++ -lm -pthread")
else()
  set(MEMCG_C_PC_LIBS "-lstdc++ -lm -pthread")
  set(MEMCG_C_PC_LIBS_PRIVATE "")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/memcg-c.pc.in ${PROJECT_BINARY_DIR}/memcg-c.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memcg-c.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT development)

# ---- Debian packages ----
# Built from a configuration with CMAKE_INSTALL_PREFIX=/usr (the Debian library directory) and,
# MEMCG_SHARED=ON or not (tests/package_check.sh, tests/python_package_check.sh).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME memcg)
set(CPACK_PACKAGE_VERSION ${memcg_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${memcg_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "memcg maintainers <memcg@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL development python)
if(TARGET memcg_shared)
  list(PREPEND CPACK_COMPONENTS_ALL runtime)
endif()
if(MEMCG_BUILD_TOOLS)
  list(APPEND CPACK_COMPONENTS_ALL tools)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libmemcg${MEMCG_SOVERSION})
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libmemcg-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME memcg-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-memcg)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3 (>= 3.9), libmemcg${MEMCG_SOVERSION} (= ${memcg_VERSION})")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "memcg: Python package over the C API (ctypes)")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "memcg: Linux memory-cgroup semantics for C++ applications (shared libraries)")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION "memcg: headers, CMake package and pkg-config file")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "memcg: memcgctl, the scenario runner")
# What the shared objects and memcgctl link (libstdc++6, libjemalloc2, libyaml-cpp0.7, ...):
# computed by dpkg-shlibdeps; libmemcg itself is found in the build tree.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# The shared objects of the optional components sit in their own build folders (memcgctl links
# memcg_host, for one).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
foreach(component hook jemalloc http prometheus_cpp host rocksdb sqlite)
  list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/src/${component})
endforeach()
# The development files need the Debian -dev packages of what the optional components use:
# memcgConfig.cmake and the link lines look for them.
set(dev_depends)
if(MEMCG_SHARED)
  list(APPEND dev_depends "libmemcg${MEMCG_SOVERSION} (= ${memcg_VERSION})")
endif()
if(TARGET memcg_jemalloc)
  list(APPEND dev_depends libjemalloc-dev)
endif()
if(TARGET memcg_http)
  list(APPEND dev_depends "libmicrohttpd-dev, pkg-config")
endif()
if(TARGET memcg_rocksdb)
  list(APPEND dev_depends librocksdb-dev)
endif()
if(TARGET memcg_prometheus_cpp)
  list(APPEND dev_depends prometheus-cpp-dev)
endif()
if(TARGET memcg_sqlite)
  list(APPEND dev_depends libsqlite3-dev)
endif()
list(JOIN dev_depends ", " CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS)
if(MEMCG_SHARED)
  set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libmemcg${MEMCG_SOVERSION} (= ${memcg_VERSION})")
endif()
include(CPack)
