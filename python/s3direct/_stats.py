"""SaveStats: what one save did, as the library reports it (struct s3d_write_stats).

Kept apart from the tensor API so that ``s3direct.SaveStats`` imports without torch.
"""

from __future__ import annotations

import dataclasses

from . import _capi


@dataclasses.dataclass(frozen=True)
class SaveStats:
    """What a save did: returned by ``s3direct.save`` and by ``save_async``'s Future. With
    ``base=`` (an incremental save), the tensors equal in the base were copied from it
    (server-side UploadPartCopy on S3, copy_file_range in a folder) instead of being sent.

    Args:
        bytes_total: bytes of every object or file written, headers included.
        bytes_sent: bytes the client uploaded or wrote itself (a part sent after a refused
            copy counts here).
        bytes_copied: bytes copied from the base without passing through the client.
        tensors_total: tensors written.
        tensors_reused: of those, the ones equal in the base (name, dtype, shape, CRC-32C).
        parts_copied: UploadPartCopy parts kept (S3), or ranges copied (files).
        copies_refused: copies the server refused or that could not be proved, sent instead.
        base_used: True when the base served at least one range; False: a full save (no
            base, or one that is missing, on other storage, without checksums, or shares
            nothing).
        bytes_cufile: local files only (0 on S3): tensor bytes written by cuFile
            (GPUDirect Storage) from GPU memory.
        bytes_direct: tensor bytes written with O_DIRECT (saves do not use it today: 0).
        bytes_buffered: tensor bytes written through the page cache (host tensors, device
            tensors staged through the pool, a failed cuFile write written again).
    """

    bytes_total: int = 0
    bytes_sent: int = 0
    bytes_copied: int = 0
    tensors_total: int = 0
    tensors_reused: int = 0
    parts_copied: int = 0
    copies_refused: int = 0
    base_used: bool = False
    bytes_cufile: int = 0
    bytes_direct: int = 0
    bytes_buffered: int = 0


def from_c(s: _capi.WriteStats) -> SaveStats:
    """The stats the library filled in (the struct given to s3d_checkpoint_write)."""
    return SaveStats(
        bytes_total=int(s.bytes_total),
        bytes_sent=int(s.bytes_sent),
        bytes_copied=int(s.bytes_copied),
        tensors_total=int(s.tensors_total),
        tensors_reused=int(s.tensors_reused),
        parts_copied=int(s.parts_copied),
        copies_refused=int(s.copies_refused),
        base_used=bool(s.base_used),
        bytes_cufile=int(s.bytes_cufile),
        bytes_direct=int(s.bytes_direct),
        bytes_buffered=int(s.bytes_buffered),
    )
