/* s3direct/transfer.h - parallel transfers of plain bytes between S3 and memory or files.
 *
 * Downloads split the object (or range) into part_size ranges fetched with max_concurrency
 * parallel ranged GETs over the client's reused keep-alive connections; each range is written
 * straight into its place in the destination. An interrupted range resumes from its last
 * received byte. Uploads below the client's multipart_threshold are one PutObject; larger ones
 * are a multipart upload of part_size parts (raised automatically so that no upload needs more
 * than 10,000 parts). A multipart upload that fails or is canceled is aborted: the object at
 * that key stays what it was before.
 *
 * Memory: transfers to and from caller buffers, and downloads to a regular file (its ranges
 * land in the file's mapped pages), use no staging memory, and neither does an upload from a
 * regular file (each part is read from the file as it is sent, after a pass of small reads
 * for its checksums). An upload from standard input or a pipe holds one part_size buffer per
 * request in flight (at most max_concurrency x
 * part_size); a download to anything else than a regular file (a pipe, a terminal) up to twice
 * that (the requests in flight and as many finished ranges waiting for an earlier one); copies
 * made through the client and upload streams at most max_concurrency buffers, and while the
 * concurrency adapts no more than the staging pool holds (staging_bytes / part_size, at least
 * 2).
 *
 * Every function runs on the calling thread and returns when the transfer is complete. */
#ifndef S3DIRECT_TRANSFER_H
#define S3DIRECT_TRANSFER_H

#include <stddef.h>
#include <stdint.h>
#include "s3direct/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options shared by all transfers; NULL means all defaults. */
struct s3d_transfer_options {
    uint32_t struct_size;     /* sizeof; 0 = current */
    s3d_progress_fn progress; /* may be NULL */
    void *progress_user;
    struct s3d_cancel *cancel; /* may be NULL */
    uint32_t max_concurrency;  /* 0 = the client's */
    uint64_t part_size;        /* 0 = the client's */
    const char *content_type;  /* uploads; NULL = application/octet-stream */
    /* Downloads: the ETag the object must still have (sent as If-Match on every request, the
     * first included), for a reader that makes several downloads of one version; S3D_ECHANGED
     * when it changed. NULL = the ETag of the download's own first response. */
    const char *if_match;
};

/* Downloads [offset, offset + length) of the object into dst (dst_cap bytes). length
 * UINT64_MAX means "to the end of the object". The number of bytes written is stored in
 * *out_len (may be NULL). S3D_ETOOBIG if the range does not fit dst_cap; S3D_ERANGE if offset
 * is past the end. */
S3D_API int s3d_download_to_buffer(struct s3d_client *c, const char *bucket, const char *key,
                                   uint64_t offset, uint64_t length, void *dst, uint64_t dst_cap,
                                   uint64_t *out_len, const struct s3d_transfer_options *opts);
/* Downloads the whole object into a file, written at its final name only when complete
 * (a temporary name in the same folder, then rename). path "-" writes to standard output. */
S3D_API int s3d_download_to_file(struct s3d_client *c, const char *bucket, const char *key,
                                 const char *path, const struct s3d_transfer_options *opts);
S3D_API int s3d_upload_from_buffer(struct s3d_client *c, const char *bucket, const char *key,
                                   const void *src, uint64_t len,
                                   const struct s3d_transfer_options *opts);
/* path "-" reads standard input (streamed, size unknown in advance). A regular file that
 * changes while it is uploaded (its size or mtime, or bytes that no longer match the checksums
 * computed from them when they are sent) fails with S3D_EIO ("file changed while reading"),
 * the key keeping its previous object. */
S3D_API int s3d_upload_from_file(struct s3d_client *c, const char *bucket, const char *key,
                                 const char *path, const struct s3d_transfer_options *opts);
/* Copies an object to another key (or bucket), replacing what is there only once the copy is
 * complete and proved: the destination gets exactly the bytes of one version of the source,
 * or the call fails and the destination keeps its previous object.
 *
 * From the multipart_threshold on, the server copies (UploadPartCopy into a multipart upload,
 * no bytes through the client), proved by MD5 ETags before CompleteMultipartUpload: a
 * single-part source (5 GiB at most) is one copied part whose ETag must be the source's; a
 * multipart source ("...-N") is copied part for part at its own boundaries (HEAD
 * ?partNumber=k), and the parts' ETags must combine to the source's. A mismatch, or a 412 to
 * x-amz-copy-source-if-match (the source was replaced during the copy), is S3D_ECHANGED, the
 * upload aborted. The copy keeps the
 * source's CRC-32C for later downloads (when the source has one s3direct can read). progress
 * reports the bytes copied as each part completes; cancel aborts.
 *
 * The copy goes through the client instead (streamed through at most max_concurrency x
 * part_size bytes, see Memory above, and checked against the source's CRC-32C), logged at info
 * level with the reason, when: the object is under the threshold; its ETag is not MD5-based
 * (SSE-KMS, SSE-C); it is one upload of over 5 GiB; the server does not tell its part sizes
 * (Ceph RGW 16), or they break S3's part rules; the server refuses UploadPartCopy (HTTP 501 or
 * NotImplemented, 400 InvalidRequest or InvalidArgument) or answers it with a non-MD5 ETag.
 * The destination's content type is opts' content_type, else the source's. */
S3D_API int s3d_copy_object(struct s3d_client *c, const char *src_bucket, const char *src_key,
                            const char *dst_bucket, const char *dst_key,
                            const struct s3d_transfer_options *opts);

/* An upload fed by successive writes of any size, for producers that do not know the size in
 * advance (torch.save into s3direct.writer). Parts are uploaded in the background of the
 * calling thread's writes; memory is bounded by max_concurrency x part_size. Nothing is
 * visible at the key until s3d_upload_stream_finish returns 0; s3d_upload_stream_free without
 * a successful finish aborts the upload. */
struct s3d_upload_stream;
S3D_API int s3d_upload_stream_new(struct s3d_client *c, const char *bucket, const char *key,
                                  const struct s3d_transfer_options *opts,
                                  struct s3d_upload_stream **out);
S3D_API int s3d_upload_stream_write(struct s3d_upload_stream *s, const void *data, size_t len);
S3D_API int s3d_upload_stream_finish(struct s3d_upload_stream *s);
/* Frees the stream; aborts the multipart upload unless s3d_upload_stream_finish returned 0.
 * NULL ok. */
S3D_API void s3d_upload_stream_free(struct s3d_upload_stream *s);

/* A local file that appears whole or not at all, written and committed as the library writes
 * its own (downloads to files, local checkpoint saves): the bytes go to a temporary file
 * ".NAME.s3d-tmp-PID-RAND" in path's folder (shortened for names of 237 bytes or more; 0666
 * less the umask for a new file, the mode of the file it replaces otherwise; flock'ed until
 * finish or free; temporary files left there for path by writers that are gone, no lock held
 * and at least 60 s old, are removed first). path is untouched until s3d_file_stream_finish syncs
 * the file, renames it over path and syncs the folder. For writers outside the library (the Python
 * package's local writer): write, seek and read through the descriptor s3d_file_stream_fd returns.
 * No client is needed. One thread at a time per stream. */
struct s3d_file_stream;
/* Returns 0, or S3D_ENOENT (path's folder does not exist), S3D_EACCESS, S3D_EIO, S3D_ENOMEM,
 * S3D_EINVAL (path or out NULL, path empty); *out is NULL on failure. */
S3D_API int s3d_file_stream_new(const char *path, struct s3d_file_stream **out);
/* The temporary file's descriptor, open for reading and writing, close-on-exec; owned by the
 * stream (never close it). -1 once finished, or when s is NULL. */
S3D_API int s3d_file_stream_fd(const struct s3d_file_stream *s);
/* Syncs the file, renames it over path, syncs the folder: 0 when path is the new file. A
 * failure before the rename removes the temporary file and leaves path as it was. Either way
 * the stream is done; free it. */
S3D_API int s3d_file_stream_finish(struct s3d_file_stream *s);
/* Frees the stream; removes the temporary file unless s3d_file_stream_finish returned 0.
 * NULL ok. */
S3D_API void s3d_file_stream_free(struct s3d_file_stream *s);

#ifdef __cplusplus
}
#endif
#endif
