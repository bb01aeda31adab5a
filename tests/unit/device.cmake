# Device layer, staging pool, CRC32C, local file I/O.
s3d_test(test_crc32c unit/test_crc32c.c)
