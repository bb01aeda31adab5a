# Engine (src/engine/): the checkpoint pipeline (ckpt_*: planning, local files, S3, device
# emulation), temporary files, the part-size rule, the buffer slots.
s3d_test(test_ckpt_plan unit/test_ckpt_plan.c)
s3d_test(test_delta_plan unit/test_delta_plan.c)
s3d_test(test_fanout unit/test_fanout.c)
s3d_test(test_shard_partition unit/test_shard_partition.c)
s3d_test(test_ckpt_local integ/test_ckpt_local.c integ/ckpt_util.c)
s3d_test(test_ckpt_file_paths integ/test_ckpt_file_paths.c integ/ckpt_util.c)
s3d_test(test_ckpt_replaced_local integ/test_ckpt_replaced_local.c integ/ckpt_util.c)
s3d_test(test_ckpt_header_crc integ/test_ckpt_header_crc.c integ/ckpt_util.c)
s3d_test(test_ckpt_s3 integ/test_ckpt_s3.c integ/ckpt_util.c)
s3d_test(test_ckpt_ready integ/test_ckpt_ready.c integ/ckpt_util.c)
s3d_test(test_ckpt_overwrite integ/test_ckpt_overwrite.c)
s3d_test(test_ckpt_concurrent integ/test_ckpt_concurrent.c)
s3d_test(test_ckpt_shards_parallel integ/test_ckpt_shards_parallel.c integ/tproxy.c integ/ckpt_util.c)
s3d_test(test_ckpt_rss integ/test_ckpt_rss.c integ/ckpt_util.c)
s3d_test(test_ckpt_many integ/test_ckpt_many.c integ/ckpt_util.c)
# Concurrent small GPU saves on a pool of a few chunks (a hold-and-wait deadlock).
s3d_test(test_ckpt_gpu_concurrent integ/test_ckpt_gpu_concurrent.c integ/ckpt_util.c)
# Readers and upload streams keep their client alive past s3d_client_free.
s3d_test(test_client_refs integ/test_client_refs.c integ/ckpt_util.c)
s3d_test(test_tmpfile unit/test_tmpfile.c)
# s3d_client_set_cancel stops every kind of request (a server that stopped answering).
s3d_test(test_client_cancel unit/test_client_cancel.c)
s3d_test(test_part_size unit/test_part_size.c)
# The precedence of a transfer's settings: argument, client option, profile, default.
s3d_test(test_transfer_settings unit/test_transfer_settings.c)
# The adaptive concurrency controller against simulated paths.
s3d_test(test_conc unit/test_conc.c)
target_link_libraries(test_conc PRIVATE m)
s3d_test(test_slots unit/test_slots.c)
s3d_test(test_out_structs unit/test_out_structs.c)
