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
