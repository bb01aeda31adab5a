/* s3direct/version.h - compile-time and run-time version of the library.
 *
 * The one place the version is written: CMakeLists.txt (project VERSION), pyproject.toml
 * (scikit-build-core's regex metadata provider) and the Python package (_version.py,
 * generated into the wheel) all read the three numbers below. Change only these. */
#ifndef S3DIRECT_VERSION_H
#define S3DIRECT_VERSION_H

#define S3D_VERSION_MAJOR 0
#define S3D_VERSION_MINOR 1
#define S3D_VERSION_PATCH 0
/* One integer, 0xMMmmpp: comparable with < and >. */
#define S3D_VERSION_HEX ((S3D_VERSION_MAJOR << 16) | (S3D_VERSION_MINOR << 8) | S3D_VERSION_PATCH)
/* "MAJOR.MINOR.PATCH", built from the numbers above. */
#define S3D_VERSION_STR_(x)  #x
#define S3D_VERSION_XSTR_(x) S3D_VERSION_STR_(x)
#define S3D_VERSION_STRING                                                                         \
    S3D_VERSION_XSTR_(S3D_VERSION_MAJOR)                                                           \
    "." S3D_VERSION_XSTR_(S3D_VERSION_MINOR) "." S3D_VERSION_XSTR_(S3D_VERSION_PATCH)

#if defined(_WIN32)
#define S3D_API __declspec(dllexport)
#elif defined(__GNUC__)
#define S3D_API __attribute__((visibility("default")))
#else
#define S3D_API
#endif

/* Structs that can grow. Every options struct and every output struct starts with uint32_t
 * struct_size, and new fields are only ever appended at its end, so a program built against an
 * older header keeps working with a newer library and the other way round:
 * - Options structs (s3d_client_options, s3d_transfer_options, s3d_read_options,
 *   s3d_write_options): set struct_size to sizeof; the library reads only that prefix and
 *   takes the fields past it as default. 0 means the library's current size.
 * - Output structs the caller provides (s3d_object_info, s3d_client_config, s3d_error_info,
 *   s3d_tensor_info): set struct_size to sizeof, or leave it 0, which means the layout of the
 *   first version (sizeof in 0.1), so a zero-initialised struct keeps working forever. The
 *   library writes only the first struct_size bytes (never past them, and never struct_size
 *   itself); fields a newer caller has and an older library does not know keep what the
 *   caller put there, so zero the struct first.
 * - Entries the library hands to a callback (s3d_list_entry, s3d_upload_entry,
 *   s3d_bucket_entry) belong to the library, which sets struct_size to the size it filled:
 *   read a field added after 0.1 only when offsetof(field) + sizeof(field) <= struct_size.
 * No function fills an array of output structs: arrays are read one element per call
 * (s3d_reader_tensor), so the caller's struct_size is the only size in play. The elements of
 * the arrays a caller passes in (s3d_tensor_dest, s3d_tensor_src, s3d_metadata_entry) have no
 * struct_size: an array's stride is its element's size, so those cannot grow; a field they
 * need later comes with a new function. */

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library actually loaded, as S3D_VERSION_HEX. The Python layer compares
 * this with the version it was written for. Thread-safe. */
S3D_API unsigned s3d_version(void);
/* The same as a static NUL-terminated string ("0.1.0"). */
S3D_API const char *s3d_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
