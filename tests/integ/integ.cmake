# Integration tests against the S3 server (skip with 77 when AWS_ENDPOINT_URL is unset).
# http engineer: the S3 client, operations, transfers and the engine.
s3d_test(test_xfer_retry integ/test_xfer_retry.c integ/tproxy.c)
s3d_test(test_s3_errors integ/test_s3_errors.c)
s3d_test(test_roundtrip integ/test_roundtrip.c)
s3d_test(test_list integ/test_list.c)
s3d_test(test_presign integ/test_presign.c)
s3d_test(test_abort_cancel integ/test_abort_cancel.c integ/tproxy.c)
s3d_test(test_big_1g integ/test_big_1g.c)
s3d_test(test_interop_aws integ/test_interop_aws.c)
s3d_test(test_tls integ/test_tls.c integ/tproxy.c)
s3d_test(test_hostile_server integ/test_hostile_server.c integ/ckpt_util.c)
# No server: a stub in the test answers the multipart calls.
s3d_test(test_ckpt_mp_pool integ/test_ckpt_mp_pool.c integ/ckpt_util.c)
s3d_test(test_reuse integ/test_reuse.c integ/tproxy.c)
s3d_test(test_creds_expired integ/test_creds_expired.c integ/tproxy.c)
s3d_test(test_consistency integ/test_consistency.c integ/tproxy.c integ/ckpt_util.c)
s3d_test(test_part_checksums integ/test_part_checksums.c integ/tproxy.c integ/ckpt_util.c)
s3d_test(test_upload_file integ/test_upload_file.c integ/tproxy.c)
