# Device layer, staging pool, CRC32C, local file I/O.
s3d_test(test_crc32c unit/test_crc32c.c)
s3d_test(test_device_host unit/test_device_host.c)
s3d_test(test_device_emu unit/test_device_emu.c)
s3d_test(test_cufile_block unit/test_cufile_block.c)
s3d_test(test_pool unit/test_pool.c)
s3d_test(test_fileio unit/test_fileio.c)
# Stand-ins for libcuda.so.1 and libcufile.so.0 (one source), found first by test_cuda_fake
# through its run path: the cuda backend's code runs without a GPU. The run path is relative
# ($ORIGIN/../fakecuda: tests/bin and tests/fakecuda side by side, here and in the GPU
# bundle), so a copy of the tests runs anywhere, never with this build folder's libraries.
set(S3D_FAKE_CUDA_DIR ${CMAKE_BINARY_DIR}/tests/fakecuda)
foreach(lib cuda cufile)
  add_library(fake_${lib} SHARED unit/fake_cuda.c)
  target_compile_definitions(fake_${lib} PRIVATE _GNU_SOURCE)
  target_link_libraries(fake_${lib} PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(fake_${lib} PROPERTIES OUTPUT_NAME ${lib}
                        LIBRARY_OUTPUT_DIRECTORY ${S3D_FAKE_CUDA_DIR})
endforeach()
set_target_properties(fake_cuda PROPERTIES SOVERSION 1)
set_target_properties(fake_cufile PROPERTIES SOVERSION 0)
s3d_test(test_cuda_fake unit/test_cuda_fake.c)
add_dependencies(test_cuda_fake fake_cuda fake_cufile)
set(S3D_FAKE_CUDA_RPATH "\$ORIGIN/../fakecuda")
set_target_properties(test_cuda_fake PROPERTIES BUILD_RPATH ${S3D_FAKE_CUDA_RPATH})
# DT_RPATH, not DT_RUNPATH: under ASan the dlopen caller is libasan, whose lookup sees only the
# executable's DT_RPATH.
target_link_options(test_cuda_fake PRIVATE -Wl,--disable-new-dtags)
# Driver rules (stream order, host-only work without CUDA) through the strict emulated device;
# the fake libcuda is on its run path, so a dlopen of libcuda.so.1 would find it.
s3d_test(test_cuda_rules unit/test_cuda_rules.c integ/ckpt_util.c)
add_dependencies(test_cuda_rules fake_cuda fake_cufile)
set_target_properties(test_cuda_rules PROPERTIES BUILD_RPATH ${S3D_FAKE_CUDA_RPATH})
target_link_options(test_cuda_rules PRIVATE -Wl,--disable-new-dtags)
# The caller's events (s3d_write_options.cuda_events) on the cuda backend, same stand-ins.
s3d_test(test_cuda_events unit/test_cuda_events.c)
add_dependencies(test_cuda_events fake_cuda fake_cufile)
set_target_properties(test_cuda_events PROPERTIES BUILD_RPATH ${S3D_FAKE_CUDA_RPATH})
target_link_options(test_cuda_events PRIVATE -Wl,--disable-new-dtags)
# The staging pool placed on its GPU's NUMA node: the same stand-ins and a sysfs tree of its own.
s3d_test(test_pool_numa unit/test_pool_numa.c)
add_dependencies(test_pool_numa fake_cuda fake_cufile)
set_target_properties(test_pool_numa PROPERTIES BUILD_RPATH ${S3D_FAKE_CUDA_RPATH})
target_link_options(test_pool_numa PRIVATE -Wl,--disable-new-dtags)
# cuFile's compatibility mode turned off before its driver opens (issue 39): the same stand-ins,
# and a libcufile without the parameter calls (cuFile before 1.14) in fakecuda-old/, which the
# test loads by its path before the library looks for libcufile.so.0.
add_library(fake_cufile_old SHARED unit/fake_cuda.c)
target_compile_definitions(fake_cufile_old PRIVATE _GNU_SOURCE FAKE_CUFILE_PRE_1_14)
target_link_libraries(fake_cufile_old PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
set_target_properties(fake_cufile_old PROPERTIES OUTPUT_NAME cufile SOVERSION 0
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fakecuda-old)
s3d_test(test_cufile_compat unit/test_cufile_compat.c)
add_dependencies(test_cufile_compat fake_cuda fake_cufile fake_cufile_old)
set_target_properties(test_cufile_compat PROPERTIES BUILD_RPATH ${S3D_FAKE_CUDA_RPATH})
target_link_options(test_cufile_compat PRIVATE -Wl,--disable-new-dtags)
