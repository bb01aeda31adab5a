"""Types shared by the checkpoint reader and the modules it drives (_ranks, _bulkload,
_into, _stream): kept apart so that none of them imports another for its types alone.
Modules that only call a few methods of a reader or client declare what they need as a
Protocol of their own (the reader's and the Client's classes satisfy it structurally)."""

from __future__ import annotations

from typing import Tuple

import torch

from . import _dtypes


class TensorEntry:
    """One tensor of an open checkpoint: index, name, s3d dtype, shape, nbytes, and whether
    the writer stored a CRC32C for it (has_crc)."""

    __slots__ = ("index", "name", "dtype", "shape", "nbytes", "has_crc")

    def __init__(
        self,
        index: int,
        name: str,
        dtype: int,
        shape: Tuple[int, ...],
        nbytes: int,
        has_crc: bool = False,
    ) -> None:
        self.index, self.name, self.dtype, self.shape, self.nbytes = (
            index,
            name,
            dtype,
            shape,
            nbytes,
        )
        self.has_crc = has_crc

    def torch_dtype(self, uri: str) -> torch.dtype:
        return _dtypes.to_torch_or_raise(self.dtype, uri, self.name)


# One destination of a read: (entry, tensor, byte offset in the entry, length).
Dest = Tuple[TensorEntry, torch.Tensor, int, int]
