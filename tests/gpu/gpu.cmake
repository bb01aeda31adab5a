# GPU tests: exit 77 (skipped) without a GPU. bench_gpu is not a test (scripts/gpu-check.sh
# runs it).
s3d_test(test_gpu_device gpu/test_gpu_device.c)
s3d_test(test_gpu_fileio gpu/test_gpu_fileio.c)
s3d_test(bench_gpu gpu/bench_gpu.c)
# The read side of s3origin.py in C (sendfile), so that gpu-check.sh's S3 -> GPU rates are not
# the origin's; checked against boto3 and s3direct by tests/py/test_gpu_origin.py.
add_executable(s3origin_get gpu/s3origin_get.c)
target_link_libraries(s3origin_get PRIVATE Threads::Threads)
set_target_properties(s3origin_get PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${S3D_TEST_BIN})
