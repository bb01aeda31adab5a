set(S3D_ENGINE_SOURCES
  src/engine/client.c
)
