set(S3D_S3_SOURCES
  src/s3/http.c
  src/s3/ops.c
  src/s3/retry.c
  src/s3/s3ctx.c
)
