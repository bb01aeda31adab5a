# Device layer, staging pool, CRC32C, local file I/O.
s3d_test(test_crc32c unit/test_crc32c.c)
s3d_test(test_device_host unit/test_device_host.c)
s3d_test(test_pool unit/test_pool.c)
s3d_test(test_fileio unit/test_fileio.c)
