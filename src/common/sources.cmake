set(S3D_COMMON_SOURCES
  src/common/alloc.c
  src/common/crc32c.c
  src/common/dynbuf.c
  src/common/error.c
  src/common/log.c
  src/common/version.c
)
