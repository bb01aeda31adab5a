set(S3D_FORMAT_SOURCES
  src/format/dtype.c
  src/format/index.c
  src/format/jsonbuf.c
  src/format/safetensors.c
  src/format/safetensors_build.c
)
