/* cabundle.h - which PEM file of trusted CAs libcurl is given (internal).
 *
 * libcurl looks for CAs at the path compiled into it. The wheel bundles Debian's libcurl, whose
 * path (/etc/ssl/certs/ca-certificates.crt) does not exist on Red Hat or SUSE, so the file is
 * chosen at run time, in this order (the first that applies wins):
 *   1. a configured bundle: options.ca_bundle, AWS_CA_BUNDLE, the profile's ca_bundle
 *      (resolved by config.c, as botocore does) - used as given, existing or not: a missing
 *      file then fails the first https request with S3D_ETLS naming it;
 *   2. SSL_CERT_FILE (OpenSSL's variable) - used as given;
 *   3. options.default_ca_bundle (the Python layer passes certifi.where() when certifi is
 *      importable, as botocore uses certifi) - when that file exists;
 *   4. the first existing file of s3d_ca_system_paths (Debian/Ubuntu, Red Hat/Fedora, SUSE,
 *      Alpine, ...);
 *   5. none: libcurl's compiled-in default.
 * Environment variables set to "" count as unset. */
#ifndef S3D_S3_CABUNDLE_H
#define S3D_S3_CABUNDLE_H

/* The known system CA files, most common first; NULL-terminated. */
extern const char *const s3d_ca_system_paths[];

/* 1 when path names an existing regular file that this process can read, else 0. */
int s3d_ca_file_usable(const char *path);

/* Chooses the bundle as above. configured, ssl_cert_file and default_bundle may be NULL or "".
 * usable tests a path (s3d_ca_file_usable; tests pass a fake). Returns one of the argument
 * strings, an entry of s3d_ca_system_paths, or NULL (curl's default); stores in *source a
 * static name of where it came from: "configured", "SSL_CERT_FILE", "default_ca_bundle",
 * "system", or "curl-default". Pure: reads no environment. */
const char *s3d_ca_bundle_choose(const char *configured, const char *ssl_cert_file,
                                 const char *default_bundle, int (*usable)(const char *path),
                                 const char **source);

#endif
