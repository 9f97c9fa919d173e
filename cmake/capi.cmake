# cmake/capi.cmake - tests of the C API (include/opfuse/opfuse.h) and of the installed package.
#
# capi.c_check: tests/c_api_compile.c built as strict C99 (pedantic, warnings are errors) and
# linked to the library, so the header stays C and every function links from C; it runs a
# small model and a few error paths. install.examples: tests/install_examples.sh installs this
# build to a temporary prefix and builds examples/ against it out of the tree, as a user would
# (find_package and pkg-config), then runs both example programs.
if(OPFUSE_BUILD_TESTS)
  add_executable(opfuse_c_api_check tests/c_api_compile.c)
  target_link_libraries(opfuse_c_api_check PRIVATE opfuse m)
  set_target_properties(opfuse_c_api_check PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_options(opfuse_c_api_check PRIVATE -Wall -Wextra -Werror -pedantic)
  # The header's OPFUSE_VERSION_* macros must say what CMake's project version says (which is
  # also what `opfuse --version` prints): both tests compare them.
  target_compile_definitions(opfuse_c_api_check PRIVATE OPFUSE_CMAKE_VERSION="${PROJECT_VERSION}")
  set_property(SOURCE tests/test_c_api.cpp APPEND PROPERTY COMPILE_DEFINITIONS OPFUSE_CMAKE_VERSION="${PROJECT_VERSION}")
  add_test(NAME capi.c_check COMMAND opfuse_c_api_check)
  set_tests_properties(capi.c_check PROPERTIES TIMEOUT 300)

  # The interpreter the Python module is built for (python/CMakeLists.txt settles on the same
  # one), so the install test imports the installed module with it.
  if(DEFINED Python_EXECUTABLE)
    set(opfuse_test_python ${Python_EXECUTABLE})
  elseif(EXISTS /usr/bin/python3)
    set(opfuse_test_python /usr/bin/python3)
  else()
    set(opfuse_test_python python3)
  endif()
  add_test(NAME install.examples
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/install_examples.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/install_examples ${CMAKE_COMMAND} ${CMAKE_C_COMPILER}
                   ${opfuse_test_python})
  set_tests_properties(install.examples PROPERTIES TIMEOUT 600)
endif()
