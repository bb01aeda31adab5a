set(S3D_DEVICE_SOURCES
  src/device/cuda_dl.c
  src/device/cufile_dl.c
  src/device/device.c
  src/device/device_host.c
  src/device/numa.c
  src/device/stream_set.c
)
