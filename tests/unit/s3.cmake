# S3 protocol pieces (src/s3: uri, config + ini + endpoint, sigv4, xml + s3doc, timefmt): pure C, no network.
s3d_test(test_sigv4 unit/test_sigv4.c)
# http/retry (owner: http): pure tables, no network.
s3d_test(test_retry unit/test_retry.c)
s3d_test(test_http_map unit/test_http_map.c)
# addrs (owner: http): the endpoint's address list, pure; the lookup of numeric names only.
s3d_test(test_addrs unit/test_addrs.c)
s3d_test(test_uri unit/test_uri.c)
s3d_test(test_xml unit/test_xml.c)
s3d_test(test_config unit/test_config.c)
s3d_test(test_cabundle unit/test_cabundle.c)
s3d_test(test_creds unit/test_creds.c)
# sigv4_tool: signs JSON request descriptions for tests/py/test_sigv4_botocore.py (not a test).
s3d_test(sigv4_tool unit/sigv4_tool.c)
# sign_bench: CPU cost of the payload hash and of signing, quoted in docs/internals/sigv4.md
# (not a test; internal API, so it is built here).
s3d_test(sign_bench unit/sign_bench.c)
s3d_test(test_emfile unit/test_emfile.c)
# the socket set of a multi handle and the unacknowledged bytes of an upload (no server).
s3d_test(test_sockset unit/test_sockset.c)
s3d_test(test_s3_op_build unit/test_s3_op_build.c)
