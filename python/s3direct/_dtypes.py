"""torch.dtype <-> enum s3d_dtype (include/s3direct/checkpoint.h).

Only dtypes this torch build has are mapped; a tensor whose dtype has no safetensors name
(complex128, quantized types, the packed float4 x2 type) is refused with its path named.
"""

from __future__ import annotations

import torch

from ._capi import DTYPE

# (torch attribute name, safetensors dtype); missing attributes are skipped (older torch).
_PAIRS = [
    ("bool", "BOOL"),
    ("uint8", "U8"),
    ("int8", "I8"),
    ("int16", "I16"),
    ("uint16", "U16"),
    ("float16", "F16"),
    ("bfloat16", "BF16"),
    ("int32", "I32"),
    ("uint32", "U32"),
    ("float32", "F32"),
    ("float64", "F64"),
    ("int64", "I64"),
    ("uint64", "U64"),
    ("complex64", "C64"),
    ("float8_e4m3fn", "F8_E4M3"),
    ("float8_e5m2", "F8_E5M2"),
    ("float8_e8m0fnu", "F8_E8M0"),
    ("float8_e4m3fnuz", "F8_E4M3FNUZ"),
    ("float8_e5m2fnuz", "F8_E5M2FNUZ"),
]

TORCH_TO_S3D: dict[torch.dtype, int] = {}
S3D_TO_TORCH: dict[int, torch.dtype] = {}
for _attr, _name in _PAIRS:
    _dt = getattr(torch, _attr, None)
    if isinstance(_dt, torch.dtype):
        TORCH_TO_S3D[_dt] = DTYPE[_name]
        S3D_TO_TORCH[DTYPE[_name]] = _dt


def to_s3d(dtype: torch.dtype) -> int | None:
    """The s3d dtype value, or None when safetensors has no name for dtype."""
    return TORCH_TO_S3D.get(dtype)


def to_torch(code: int) -> torch.dtype | None:
    """The torch dtype, or None when this torch build has none for the s3d dtype."""
    return S3D_TO_TORCH.get(code)


def to_torch_or_raise(code: int, uri: str, tensor: str) -> torch.dtype:
    """to_torch(code), or NotSupported naming the tensor of uri when this torch has none."""
    dt = S3D_TO_TORCH.get(code)
    if dt is None:
        from . import errors

        raise errors.NotSupported(
            errors.S3D_ENOTSUP,
            f"{uri}: tensor {tensor} has dtype {name(code)}, which this torch "
            f"({torch.__version__}) has no dtype for",
        )
    return dt


def name(code: int) -> str:
    from ._capi import DTYPE_NAMES

    return DTYPE_NAMES[code] if 0 <= code < len(DTYPE_NAMES) else f"dtype#{code}"
