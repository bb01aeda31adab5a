/* ckpt_util.h - helpers for the checkpoint tests: a set of tensors with random bytes, and a
 * full verification of what a reader returns against them. */
#ifndef S3D_TEST_CKPT_UTIL_H
#define S3D_TEST_CKPT_UTIL_H

#include "testutil.h"

struct t_tensors {
    size_t n;
    struct s3d_tensor_src *src;
    int64_t (*shapes)[4];
    char **names;
    void **data;
};

/* n tensors cycling through every dtype, with shapes that include a 0-d scalar and an empty
 * tensor, sizes up to max_elems elements, bytes from seed. */
void t_make_tensors(struct t_tensors *ts, size_t n, size_t max_elems, uint64_t seed);
void t_free_tensors(struct t_tensors *ts);

/* Opens uri, checks every tensor's name, dtype, shape and size against ts, reads them all
 * (into host memory when device < 0, else into "device" memory of the emulated backend) and
 * compares the bytes. */
/* Emulated device memory (S3D_DEVICE_EMULATE backend) holding a copy of n bytes of src; the
 * pointer is not dereferenceable from the host. t_emu_free accepts 0. */
uint64_t t_emu_copy(const void *src, size_t n);
void t_emu_free(uint64_t dptr);
/* The same on emulated device ordinal (S3D_DEVICE_EMULATE_COUNT > ordinal). */
uint64_t t_emu_copy_on(int ordinal, const void *src, size_t n);
void t_emu_free_on(int ordinal, uint64_t dptr);
/* Moves tensor i of ts to emulated device 0 (ptr becomes a device address; freed by
 * t_free_tensors). */
void t_tensor_to_emu(struct t_tensors *ts, size_t i);

/* Saves one tensor per emulated device 0..n_devices-1 whose producing "kernel" is still
 * queued on the caller's stream of that device, then loads into destinations that a queued
 * kernel still writes, passing the per-device streams: fails the test unless both waits are
 * honoured. Needs S3D_DEVICE_EMULATE=1 for c (and S3D_DEVICE_EMULATE_COUNT >= n_devices). */
void t_check_stream_order(struct s3d_client *c, const char *uri, int n_devices, int file_io);
/* Saves one tensor per emulated device 0..n_devices-1 with the caller's events
 * (s3d_write_options.cuda_events): on each device a producing kernel, an event recorded after
 * it, and on the devices with an event a kernel queued after it that overwrites the tensor.
 * With several devices the last has no event (0: its stream is waited for). Fails the test
 * unless the saved bytes are the producer's: a save that waits for nothing saves zeros, one
 * that waits for the caller's whole stream saves the later kernel's bytes. max_shard_size as
 * in s3d_write_options (uri then names an index). */
void t_check_event_order(struct s3d_client *c, const char *uri, int n_devices, int file_io,
                         uint64_t max_shard_size);

void t_verify_checkpoint(struct s3d_client *c, const char *uri, const struct t_tensors *ts,
                         int device);

#endif

/* A TCP relay on 127.0.0.1 in front of the test S3 server that counts the bytes the server
 * sends back. Returns the endpoint URL to give the client ("http://127.0.0.1:PORT"). */
const char *t_proxy_start(void);
/* Bytes sent by the server through the relay so far; t_proxy_reset sets it to 0. */
uint64_t t_proxy_bytes(void);
void t_proxy_reset(void);
