"""load() of a whole checkpoint with as few Python objects a tensor as it can (issue 35, item
9: a header of 1.66 M small tensors took 2 GB of Python memory to load).

The general path (_checkpoint._load with keys= or group=) lists every tensor of the file as a
TensorEntry and every destination as a tuple, and keeps a name -> tensor dict beside the
tree. A plain load() needs none of them: each tensor the tree names is looked up in the C
reader (s3d_reader_find, s3d_reader_tensor), allocated, and written straight into its slot of
the struct s3d_tensor_dest array (Dests); the tensors are kept in tree order, which is the
order unflatten() asks for them in. What stays a tensor is the tensor itself, 48 bytes of
array and 16 of bookkeeping; docs/internals/performance.md has the numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
from array import array
from typing import Any, Optional, Protocol

import torch

from . import _capi, _dtypes, _tree, errors
from ._capi import enc
from ._progress import ProgressArg


class CheckpointReader(Protocol):
    """What load_all needs of _reader.CheckpointReader (declared here, not imported:
    _reader and _checkpoint import this module)."""

    uri: str
    _lib: Any

    def _use(self) -> contextlib.AbstractContextManager[ctypes.c_void_p]: ...

    def read_dests(
        self, d: Dests, *, progress: ProgressArg = False, verify: bool = True
    ) -> None: ...


MAX_CUDA_ORDINAL = 63  # the C layer's per-device tables hold ordinals 0..63


def dest_device(t: torch.Tensor) -> int:
    """The C device number of a destination tensor, after the checks that keep the C reader
    from writing where it must not: contiguous memory only (a strided view's data_ptr does
    not hold numel() contiguous bytes), CPU or CUDA only (mps/xpu pointers are not host
    memory and not CUdeviceptr)."""
    if t.device.type not in ("cpu", "cuda"):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"destination tensor on {t.device}: s3direct reads into CPU or CUDA memory only; "
            f"load to the CPU and move it with .to({str(t.device)!r})",
        )
    if t.layout != torch.strided or not t.is_contiguous():
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"destination tensor is not contiguous (shape {tuple(t.shape)}, stride "
            f"{tuple(t.stride()) if t.layout == torch.strided else t.layout}): the bytes would "
            f"land past the view; pass a contiguous tensor and copy_() into the view",
        )
    if t.device.type == "cpu":
        return -1
    idx = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if not 0 <= idx <= MAX_CUDA_ORDINAL:
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"destination on cuda:{idx}: ordinals 0..{MAX_CUDA_ORDINAL} are supported",
        )
    return idx


class Dests:
    """A struct s3d_tensor_dest array for up to cap destinations, filled in place (no list of
    tuples first), and the devices it writes to."""

    def __init__(self, cap: int) -> None:
        self.arr = (_capi.TensorDest * max(cap, 1))()
        self.n = 0
        self.devices: set[int] = set()

    def add(
        self, index: int, t: torch.Tensor, device: int, src_offset: int = 0, length: int = 0
    ) -> None:
        """Tensor index of the reader into t (device: dest_device(t)); length 0: all of it."""
        d = self.arr[self.n]
        d.index = index
        d.device = device
        d.ptr = t.data_ptr() or None
        d.capacity = t.numel() * t.element_size()
        d.src_offset = src_offset
        d.length = length
        self.n += 1
        self.devices.add(device)


class _Alloc:
    """Allocates the destination of a tensor named in the tree, at most once a tensor."""

    def __init__(
        self, r: CheckpointReader, h: ctypes.c_void_p, alloc_dev: torch.device, n: int
    ) -> None:
        self.r, self.h, self.alloc_dev = r, h, alloc_dev
        self.dests = Dests(n)
        self.device: Optional[int] = None
        self.info = _capi.TensorInfo()
        self.idx = ctypes.c_size_t()
        self.dtypes: dict[int, torch.dtype] = {}

    def new(self, index: int) -> torch.Tensor:
        """A new tensor for reader tensor index (self.info is filled with it), added to the
        destinations."""
        lib, info = self.r._lib, self.info
        lib.check(lib.s3d_reader_tensor(self.h, index, ctypes.byref(info)))
        dt = self.dtypes.get(info.dtype)
        if dt is None:
            dt = _dtypes.to_torch_or_raise(info.dtype, self.r.uri, info.name.decode("utf-8"))
            self.dtypes[info.dtype] = dt
        t = torch.empty(tuple(info.shape[: info.ndim]), dtype=dt, device=self.alloc_dev)
        if self.device is None:
            self.device = dest_device(t)  # every tensor here is on alloc_dev
        self.dests.add(index, t, self.device)
        return t

    def find(self, name: str) -> int:
        """The reader's index of the tensor called name; FormatError if the file has none."""
        lib = self.r._lib
        try:
            key = enc(name) if "\0" not in name else None
        except UnicodeEncodeError:  # a lone surrogate: no name in a file is one
            key = None
        if key is None or lib.s3d_reader_find(self.h, key, ctypes.byref(self.idx)) != 0:
            raise errors.FormatError(
                errors.S3D_EFMT_METADATA,
                f"{self.r.uri}: the tree names tensor {name!r}, which the file does not hold",
            )
        return self.idx.value


def load_all(
    r: CheckpointReader,
    doc: Optional[dict[str, Any]],
    alloc_dev: torch.device,
    dev: torch.device,
    allow_pickle: bool,
    progress: ProgressArg,
    verify: bool,
) -> Any:
    """What load() returns for r with no keys and no group: the saved structure (doc, from
    _tree_doc), or a dict name -> tensor for a file without a tree. Tensors are allocated on
    alloc_dev and moved to dev after the read when the two differ."""
    with r._use() as h:
        n = r._lib.s3d_reader_num_tensors(h)
        a = _Alloc(r, h, alloc_dev, n)
        if doc is None:
            out: dict[str, torch.Tensor] = {}
            for i in range(n):
                t = a.new(i)
                out[a.info.name.decode("utf-8")] = t
        else:
            # Tensors in tree order; a name the tree gives twice (tied weights) is read once:
            # at[index] is where its tensor is in seq (-1: not yet).
            seq: list[torch.Tensor] = []
            at = array("q", [-1]) * n
            for path, tag, node in _tree.walk(doc["tree"]):
                if tag == "p":
                    if allow_pickle:
                        continue
                    raise _tree.pickle_refused(r.uri, path)
                i = a.find(node["t"])
                if at[i] < 0:
                    at[i] = len(seq)
                    seq.append(a.new(i))
                else:
                    seq.append(seq[at[i]])
            del at
    dests = a.dests
    del a
    r.read_dests(dests, progress=progress, verify=verify)
    del dests  # the array, before the result is built
    if doc is None:
        return out if alloc_dev == dev else {k: v.to(dev) for k, v in out.items()}
    if alloc_dev != dev:
        seq = [t.to(dev) for t in seq]
    it = iter(seq)
    del seq
    result = _tree.unflatten(doc["tree"], lambda name, path: next(it), allow_pickle=allow_pickle)
    if next(it, None) is not None:  # walk() and unflatten() visit leaves in the same order
        raise AssertionError("load: tree leaves and tensors out of step")
    return result
