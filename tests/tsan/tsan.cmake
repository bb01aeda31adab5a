# make tsan: the Python interpreter with TSan's runtime linked in (python_tsan.c), built
# against the python3 that runs the tests (S3D_PYTHON, set by scripts/tsan.sh).
if(NOT S3D_PYTHON)
  message(FATAL_ERROR "S3D_TSAN: set S3D_PYTHON to the python3 that runs the tests")
endif()
set(Python3_EXECUTABLE ${S3D_PYTHON})
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Embed)
add_executable(s3d_python_tsan tsan/python_tsan.c)
target_link_libraries(s3d_python_tsan PRIVATE Python3::Python)
# libpython from a prefix outside the loader's path (pyenv) is found through the rpath.
set_target_properties(s3d_python_tsan PROPERTIES OUTPUT_NAME python-tsan
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/tsan
                      BUILD_RPATH "${Python3_RUNTIME_LIBRARY_DIRS};${Python3_LIBRARY_DIRS}")
