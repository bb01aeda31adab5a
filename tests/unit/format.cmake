# Format module (src/format): dtype table, safetensors header, sharded index, malformed corpus.
s3d_test(test_dtype unit/test_dtype.c)
s3d_test(test_safetensors unit/test_safetensors.c)
s3d_test(test_index unit/test_index.c)
s3d_test(test_st_memory unit/test_st_memory.c)
s3d_test(test_malformed unit/test_malformed.c)
target_compile_definitions(test_malformed PRIVATE
  S3D_MALFORMED_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/malformed")

# st_tool: parse/write safetensors files for the Python interop test (not a test itself).
s3d_test(st_tool unit/st_tool.c)
