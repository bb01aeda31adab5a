s3d_test(test_errors unit/test_errors.c)
s3d_test(test_dynbuf unit/test_dynbuf.c)
s3d_test(test_prefault unit/test_prefault.c)
s3d_test(test_assert unit/test_assert.c)
