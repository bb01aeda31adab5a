# GPU tests: exit 77 (skipped) without a GPU. bench_gpu is not a test (scripts/gpu-check.sh
# runs it).
s3d_test(test_gpu_device gpu/test_gpu_device.c)
s3d_test(test_gpu_fileio gpu/test_gpu_fileio.c)
s3d_test(bench_gpu gpu/bench_gpu.c)
