/* dtype.c - the safetensors dtype table and tensor sizes (public s3d_dtype_* functions).
 *
 * Names and bit widths follow the reference crate's Dtype (safetensors 0.8): sub-byte types
 * F4 (4 bits) and F6_E2M3/F6_E3M2 (6 bits) are packed, and a tensor of them is valid only
 * when element count x bits is a whole number of bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "s3direct/checkpoint.h"

struct dtype_desc {
    const char *name;
    int bits;
};

/* Indexed by enum s3d_dtype. */
static const struct dtype_desc dtypes[S3D_DTYPE_COUNT_] = {
    [S3D_DTYPE_INVALID] = {NULL, 0},
    [S3D_DTYPE_BOOL] = {"BOOL", 8},
    [S3D_DTYPE_U8] = {"U8", 8},
    [S3D_DTYPE_I8] = {"I8", 8},
    [S3D_DTYPE_I16] = {"I16", 16},
    [S3D_DTYPE_U16] = {"U16", 16},
    [S3D_DTYPE_F16] = {"F16", 16},
    [S3D_DTYPE_BF16] = {"BF16", 16},
    [S3D_DTYPE_I32] = {"I32", 32},
    [S3D_DTYPE_U32] = {"U32", 32},
    [S3D_DTYPE_F32] = {"F32", 32},
    [S3D_DTYPE_F64] = {"F64", 64},
    [S3D_DTYPE_I64] = {"I64", 64},
    [S3D_DTYPE_U64] = {"U64", 64},
    [S3D_DTYPE_C64] = {"C64", 64},
    [S3D_DTYPE_F8_E4M3] = {"F8_E4M3", 8},
    [S3D_DTYPE_F8_E5M2] = {"F8_E5M2", 8},
    [S3D_DTYPE_F8_E8M0] = {"F8_E8M0", 8},
    [S3D_DTYPE_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [S3D_DTYPE_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [S3D_DTYPE_F4] = {"F4", 4},
    [S3D_DTYPE_F6_E2M3] = {"F6_E2M3", 6},
    [S3D_DTYPE_F6_E3M2] = {"F6_E3M2", 6},
};

const char *s3d_dtype_name(int dtype)
{
    if (dtype <= S3D_DTYPE_INVALID || dtype >= S3D_DTYPE_COUNT_)
        return NULL;
    return dtypes[dtype].name;
}

int s3d_dtype_from_name(const char *name, size_t len)
{
    if (name == NULL)
        return S3D_DTYPE_INVALID;
    /* Exact, case-sensitive match: the reference rejects "f32". */
    for (int d = S3D_DTYPE_INVALID + 1; d < S3D_DTYPE_COUNT_; d++) {
        if (strlen(dtypes[d].name) == len && memcmp(dtypes[d].name, name, len) == 0)
            return d;
    }
    return S3D_DTYPE_INVALID;
}

int s3d_dtype_bits(int dtype)
{
    if (dtype <= S3D_DTYPE_INVALID || dtype >= S3D_DTYPE_COUNT_)
        return 0;
    return dtypes[dtype].bits;
}

int s3d_dtype_nbytes(int dtype, const int64_t *shape, int32_t ndim, uint64_t *out)
{
    uint64_t elems = 1, bits;
    int width = s3d_dtype_bits(dtype);

    if (width == 0)
        return s3d_fail(S3D_EFMT_DTYPE, "invalid dtype value %d", dtype);
    if (ndim < 0)
        return s3d_fail(S3D_EFMT_SHAPE, "negative number of dimensions %" PRId32, ndim);
    if (ndim > 0 && shape == NULL)
        return s3d_fail(S3D_EINVAL, "shape is NULL with %" PRId32 " dimensions", ndim);
    /* Multiply in order and fail on the first overflow, as the reference's checked fold
     * does: [2^40, 2^40, 0] overflows there even though the product is 0. */
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return s3d_fail(S3D_EFMT_SHAPE, "dimension %" PRId32 " is negative (%" PRId64 ")", i,
                            shape[i]);
        if (s3d_mul_u64(elems, (uint64_t)shape[i], &elems) < 0)
            return s3d_fail(S3D_EFMT_SHAPE, "element count overflows at dimension %" PRId32, i);
    }
    if (s3d_mul_u64(elems, (uint64_t)width, &bits) < 0)
        return s3d_fail(S3D_EFMT_SHAPE, "%" PRIu64 " elements of %s overflow a byte count", elems,
                        dtypes[dtype].name);
    if (bits % 8 != 0)
        return s3d_fail(S3D_EFMT_SIZE_MISMATCH,
                        "%" PRIu64 " elements of %s are %" PRIu64 " bits, not whole bytes", elems,
                        dtypes[dtype].name, bits);
    *out = bits / 8;
    return 0;
}
