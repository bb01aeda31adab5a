# S3 protocol pieces (src/s3: uri, config, sigv4, xml, timefmt): pure C, no network.
s3d_test(test_sigv4 unit/test_sigv4.c)
