# Format module (src/format): dtype table, safetensors header, sharded index, malformed corpus.
s3d_test(test_dtype unit/test_dtype.c)
s3d_test(test_safetensors unit/test_safetensors.c)
s3d_test(test_index unit/test_index.c)
s3d_test(test_malformed unit/test_malformed.c)
target_compile_definitions(test_malformed PRIVATE
  S3D_MALFORMED_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/malformed")

# The fuzz target, run here by a plain driver over the committed corpus as an ordinary test.
s3d_test(test_fuzz_safetensors fuzz/fuzz_safetensors.c fuzz/fuzz_main.c)
target_compile_definitions(test_fuzz_safetensors PRIVATE
  S3D_FUZZ_CORPUS="${CMAKE_CURRENT_SOURCE_DIR}/data/malformed")
# With clang, also a real libFuzzer binary (not run by the test runner):
#   CC=clang cmake -S . -B build-fuzz -DS3D_SANITIZE=ON && cmake --build build-fuzz
#   --target fuzz_safetensors && build-fuzz/tests/bin/fuzz_safetensors tests/data/malformed
if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_safetensors fuzz/fuzz_safetensors.c)
  target_compile_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_safetensors PRIVATE s3direct_internal)
  target_compile_definitions(fuzz_safetensors PRIVATE _GNU_SOURCE)
  set_target_properties(fuzz_safetensors PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${S3D_TEST_BIN})
endif()

# st_tool: parse/write safetensors files for the Python interop test (not a test itself).
s3d_test(st_tool unit/st_tool.c)
