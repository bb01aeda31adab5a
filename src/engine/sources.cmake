set(S3D_ENGINE_SOURCES
  src/engine/client.c
  src/engine/api_object.c
  src/engine/transfer.c
  src/engine/upload_stream.c
  src/engine/xfer.c
)
