/* test_dtype.c - the dtype table (names and widths of the reference's Dtype) and tensor
 * byte sizes with the sub-byte rule. */
#include "testutil.h"

static const struct {
    int dtype;
    const char *name;
    int bits;
} table[] = {
    {S3D_DTYPE_BOOL, "BOOL", 8},
    {S3D_DTYPE_U8, "U8", 8},
    {S3D_DTYPE_I8, "I8", 8},
    {S3D_DTYPE_I16, "I16", 16},
    {S3D_DTYPE_U16, "U16", 16},
    {S3D_DTYPE_F16, "F16", 16},
    {S3D_DTYPE_BF16, "BF16", 16},
    {S3D_DTYPE_I32, "I32", 32},
    {S3D_DTYPE_U32, "U32", 32},
    {S3D_DTYPE_F32, "F32", 32},
    {S3D_DTYPE_F64, "F64", 64},
    {S3D_DTYPE_I64, "I64", 64},
    {S3D_DTYPE_U64, "U64", 64},
    {S3D_DTYPE_C64, "C64", 64},
    {S3D_DTYPE_F8_E4M3, "F8_E4M3", 8},
    {S3D_DTYPE_F8_E5M2, "F8_E5M2", 8},
    {S3D_DTYPE_F8_E8M0, "F8_E8M0", 8},
    {S3D_DTYPE_F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {S3D_DTYPE_F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {S3D_DTYPE_F4, "F4", 4},
    {S3D_DTYPE_F6_E2M3, "F6_E2M3", 6},
    {S3D_DTYPE_F6_E3M2, "F6_E3M2", 6},
};

int main(void)
{
    uint64_t n;

    /* Every value of the enum is in the table, once. */
    CHECK(sizeof(table) / sizeof(table[0]) == S3D_DTYPE_COUNT_ - 1);
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        CHECK_STREQ(s3d_dtype_name(table[i].dtype), table[i].name);
        CHECK(s3d_dtype_from_name(table[i].name, strlen(table[i].name)) == table[i].dtype);
        CHECK(s3d_dtype_bits(table[i].dtype) == table[i].bits);
    }
    CHECK(s3d_dtype_name(S3D_DTYPE_INVALID) == NULL);
    CHECK(s3d_dtype_name(S3D_DTYPE_COUNT_) == NULL);
    CHECK(s3d_dtype_name(-3) == NULL);
    CHECK(s3d_dtype_bits(S3D_DTYPE_INVALID) == 0);
    /* Case-sensitive and exact, as the reference's serde enum. */
    CHECK(s3d_dtype_from_name("f32", 3) == S3D_DTYPE_INVALID);
    CHECK(s3d_dtype_from_name("F32 ", 4) == S3D_DTYPE_INVALID);
    CHECK(s3d_dtype_from_name("F3", 2) == S3D_DTYPE_INVALID);
    CHECK(s3d_dtype_from_name("F8_E4M3FN", 9) == S3D_DTYPE_INVALID);
    CHECK(s3d_dtype_from_name("F32", 2) == S3D_DTYPE_INVALID); /* length is honoured */
    CHECK(s3d_dtype_from_name("F16xyz", 3) == S3D_DTYPE_F16);
    CHECK(s3d_dtype_from_name(NULL, 0) == S3D_DTYPE_INVALID);

    {
        const int64_t s23[] = {2, 3};
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_F32, s23, 2, &n));
        CHECK_EQ_U64(n, 24);
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_C64, s23, 2, &n));
        CHECK_EQ_U64(n, 48);
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_BF16, s23, 2, &n));
        CHECK_EQ_U64(n, 12);
    }
    /* Scalar: shape [] holds one element. */
    CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_F64, NULL, 0, &n));
    CHECK_EQ_U64(n, 8);
    /* Empty tensor. */
    {
        const int64_t s[] = {4, 0, 7};
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_I64, s, 3, &n));
        CHECK_EQ_U64(n, 0);
    }
    /* Sub-byte: F4 packs two per byte, F6 four per three bytes. */
    {
        const int64_t s4[] = {4}, s3[] = {3}, s1[] = {1}, s8[] = {2, 4};
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_F4, s4, 1, &n));
        CHECK_EQ_U64(n, 2);
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_F4, s3, 1, &n), S3D_EFMT_SIZE_MISMATCH);
        CHECK_MSG_HAS("not whole bytes");
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_F6_E2M3, s4, 1, &n));
        CHECK_EQ_U64(n, 3);
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_F6_E3M2, s1, 1, &n), S3D_EFMT_SIZE_MISMATCH);
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_F6_E3M2, s3, 1, &n), S3D_EFMT_SIZE_MISMATCH);
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_F6_E3M2, s8, 2, &n));
        CHECK_EQ_U64(n, 6);
        /* A scalar F4 is 4 bits: not storable. */
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_F4, NULL, 0, &n), S3D_EFMT_SIZE_MISMATCH);
    }
    /* Negative dimension, negative ndim, overflow, invalid dtype. */
    {
        const int64_t neg[] = {2, -1};
        const int64_t big[] = {INT64_C(1) << 32, INT64_C(1) << 32};
        const int64_t big0[] = {INT64_C(1) << 40, INT64_C(1) << 40, 0};
        const int64_t zero_first[] = {0, INT64_C(1) << 40, INT64_C(1) << 40};
        const int64_t bits_ovf[] = {INT64_C(1) << 62};
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_U8, neg, 2, &n), S3D_EFMT_SHAPE);
        CHECK_MSG_HAS("negative");
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_U8, neg, -1, &n), S3D_EFMT_SHAPE);
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_U8, big, 2, &n), S3D_EFMT_SHAPE);
        CHECK_MSG_HAS("overflow");
        /* The reference multiplies left to right and fails at the first overflow. */
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_U8, big0, 3, &n), S3D_EFMT_SHAPE);
        CHECK_OK(s3d_dtype_nbytes(S3D_DTYPE_U8, zero_first, 3, &n));
        CHECK_EQ_U64(n, 0);
        /* Elements fit, bits do not: 2^62 x 8 bits. */
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_U8, bits_ovf, 1, &n), S3D_EFMT_SHAPE);
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_INVALID, neg, 0, &n), S3D_EFMT_DTYPE);
        CHECK_ERR(s3d_dtype_nbytes(99, neg, 0, &n), S3D_EFMT_DTYPE);
        CHECK_ERR(s3d_dtype_nbytes(S3D_DTYPE_U8, NULL, 1, &n), S3D_EINVAL);
    }
    printf("ok\n");
    return 0;
}
