# libcortiq for other programs: the C API (include/cortiq.h) and the layers under it, as a shared
# library (libcortiq.so, exporting only cortiq_* symbols) and a static archive (libcortiq.a);
# install rules with a pkg-config file and a CMake package; the C, Python and install tests.
#
# Both libraries are made of the layers' own object files (no second compile): those layers are
# built position-independent with -fno-semantic-interposition, which keeps GCC inlining and calling
# within them as in a PIE executable (measured in bench/README.md, "libcortiq and -fPIC").
include(GNUInstallDirs)

set(CORTIQ_LIB_LAYERS util quant kernels cmf tokenizer model runtime capi)
set(_cortiq_objs)
foreach(l ${CORTIQ_LIB_LAYERS})
  set_target_properties(cortiq_${l} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(cortiq_${l} PRIVATE -fno-semantic-interposition)
  endif()
  list(APPEND _cortiq_objs $<TARGET_OBJECTS:cortiq_${l}>)
endforeach()
# What the layers link (the link lists of cortiq_add_layer above, minus the layers themselves).
set(CORTIQ_LIB_DEPS fmt::fmt Threads::Threads nlohmann_json::nlohmann_json OpenSSL::Crypto
                    PkgConfig::ONIG PkgConfig::UTF8PROC)

add_library(cortiq_shared SHARED ${_cortiq_objs})
target_link_libraries(cortiq_shared PRIVATE ${CORTIQ_LIB_DEPS})
target_include_directories(cortiq_shared PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>)
target_link_options(cortiq_shared PRIVATE -Wl,--version-script=${CMAKE_SOURCE_DIR}/cmake/cortiq.map
                    -Wl,--no-undefined)
set_target_properties(cortiq_shared PROPERTIES OUTPUT_NAME cortiq VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR} LINK_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/cortiq.map)

add_library(cortiq_static STATIC ${_cortiq_objs})
set_target_properties(cortiq_static PROPERTIES OUTPUT_NAME cortiq)

# ---- install: cortiq, libcortiq.{so,a}, cortiq.h, cortiq.pc, CMake package cortiq::cortiq
install(TARGETS cortiq_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS cortiq_shared cortiq_static LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/cortiq.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The static archive's own dependencies, for pkg-config --static and the CMake static target.
set(CORTIQ_STATIC_LIBS "-lfmt -lcrypto -lonig -lutf8proc -lstdc++ -lm -lpthread")
# Relocatable: the prefix is found from where cortiq.pc lies (cmake --install --prefix P works).
file(RELATIVE_PATH CORTIQ_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" CORTIQ_PC_TO_PREFIX "${CORTIQ_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/cortiq.pc.in ${CMAKE_BINARY_DIR}/cortiq.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cortiq.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
include(CMakePackageConfigHelpers)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/CortiqConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/CortiqConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Cortiq
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/CortiqConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/CortiqConfig.cmake ${CMAKE_BINARY_DIR}/CortiqConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Cortiq)

# ---- tests: a C program over the C API, the Python binding, and the installed tree.
# capi.prepare converts the embedded stories260K (with a small chat template) and records what the
# CLI answers (greedy run, tokenize, template, ppl): the oracles of the C and Python tests.
if(NOT CORTIQ_SANITIZE AND NOT CORTIQ_FUZZ)
  enable_language(C)
  add_executable(capi_test ${CMAKE_SOURCE_DIR}/tests/capi/capi_test.c)
  set_target_properties(capi_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_options(capi_test PRIVATE -Wall -Wextra -pedantic)
  target_link_libraries(capi_test PRIVATE cortiq_shared m)
  set(_fix ${CMAKE_BINARY_DIR}/capi-fixture)
  add_test(NAME capi.prepare COMMAND bash ${CMAKE_SOURCE_DIR}/tests/capi/prepare.sh $<TARGET_FILE:cortiq_cli> ${_fix})
  set_tests_properties(capi.prepare PROPERTIES FIXTURES_SETUP capi_model)
  add_test(NAME capi.c COMMAND capi_test ${_fix})
  add_test(NAME capi.python COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/python/tests/test_cortiq.py ${_fix})
  set_tests_properties(capi.c capi.python PROPERTIES FIXTURES_REQUIRED capi_model)
  set_tests_properties(capi.python PROPERTIES ENVIRONMENT
                       "CORTIQ_LIBRARY=$<TARGET_FILE:cortiq_shared>;PYTHONPATH=${CMAKE_SOURCE_DIR}/python")
  add_test(NAME capi.install COMMAND bash ${CMAKE_SOURCE_DIR}/tests/capi/install_test.sh ${CMAKE_BINARY_DIR}
                                     ${CMAKE_SOURCE_DIR}/tests/capi/hello.c ${_fix})
  set_tests_properties(capi.install PROPERTIES FIXTURES_REQUIRED capi_model)
endif()
