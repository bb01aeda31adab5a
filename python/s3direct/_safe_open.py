"""safe_open: the safetensors API (``safetensors.safe_open``) over S3, local files and
Hugging Face index URIs, served by the C reader.

Opening reads the header(s) only. get_tensor() fetches one tensor's byte range; get_slice()
returns a lazy slice whose ``[...]`` fetches only the byte ranges that hold the selected
elements (one ranged read per contiguous run, all in one planned transfer).
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from . import _dtypes, errors
from ._checkpoint import _device
from ._progress import Combined, ProgressArg
from ._reader import CheckpointReader
from ._types import TensorEntry
from .client import Client

# More runs than this and a slice reads the rows that bound it instead (one range).
_MAX_RUNS = 1 << 16


class safe_open:  # noqa: N801 - the name safetensors users know
    """An open checkpoint, as ``safetensors.safe_open(path, framework="pt", device=...)``.

    Args:
        uri: ``s3://bucket/key``, a local path or ``file://`` URI, a ``.safetensors.index.json``
            (its shards are opened together) or a folder holding ``model.safetensors`` or
            ``model.safetensors.index.json``.
        framework: ``"pt"`` (or ``"torch"``, ``"pytorch"``); other frameworks are not served.
        device: where tensors are allocated: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, an int
            (a CUDA ordinal, as safetensors takes it) or a ``torch.device``.
        client: the Client to use (default: the process's default client).
        verify: check each whole tensor against its stored CRC32C (slices are not checked).
        progress: True (a bar, or one summary line at close, over every read of this file) or
            a callable(done_bytes, total_bytes) called with the running sums.

    Raises:
        NoSuchKey / NoSuchFile: nothing at uri. FormatError: not a safetensors file (a
        ``torch.save`` file says so). ConfigError: a location s3direct cannot use.

    Use as a context manager, or call close().
    """

    def __init__(
        self,
        uri: Union[str, "os.PathLike[str]"],
        framework: str = "pt",
        device: Union[str, int, torch.device] = "cpu",
        *,
        client: Optional[Client] = None,
        verify: bool = True,
        progress: ProgressArg = False,
    ) -> None:
        if framework not in ("pt", "torch", "pytorch"):
            raise errors.NotSupported(
                errors.S3D_ENOTSUP,
                f"safe_open: framework {framework!r} is not served; "
                f"s3direct gives PyTorch tensors (framework='pt')",
            )
        if isinstance(device, int):
            device = torch.device("cuda", device)
        self._device = _device(device)
        self._verify = verify
        self._r: Optional[CheckpointReader] = CheckpointReader(uri, client)
        self._prog: Optional[Combined] = (
            None
            if progress is False or progress is None
            else Combined(progress, f"safe_open {os.path.basename(self._r.uri.rstrip('/'))}")
        )

    @property
    def uri(self) -> str:
        """The object or file opened (a folder resolved to the model file in it)."""
        return self._reader().uri

    def _reader(self) -> CheckpointReader:
        if self._r is None:
            raise ValueError("safe_open: the file is closed")
        return self._r

    def _entry(self, name: str) -> TensorEntry:
        r = self._reader()
        e = r.by_name.get(name)
        if e is None:
            # A tied name save() stored once: the tensor it is tied to (as load() gives it).
            kept = r.tied_names().get(name)
            e = None if kept is None else r.by_name.get(kept)
        if e is None:
            raise KeyError(f"{r.uri}: no tensor named {name!r}")
        return e

    def keys(self) -> List[str]:
        """The tensor names.

        Returns:
            The names, sorted (as safetensors returns them).

        Raises:
            ValueError: the file is closed.
        """
        return sorted(self._reader().by_name)

    def offset_keys(self) -> List[str]:
        """The tensor names in file order.

        Returns:
            The names in the order of their data in the file(s).

        Raises:
            ValueError: the file is closed.
        """
        return [e.name for e in self._reader().tensors]

    def metadata(self) -> Optional[Dict[str, str]]:
        """The ``__metadata__`` of the file.

        Returns:
            Its str -> str entries (the first shard's for an index), or None when it has none.

        Raises:
            ValueError: the file is closed.
        """
        md = self._reader().metadata()
        return md or None

    def get_tensor(self, name: str) -> torch.Tensor:
        """The whole tensor, allocated on the device and filled by one ranged read.

        Args:
            name: the tensor's name.

        Returns:
            The tensor, on the device safe_open was given.

        Raises:
            KeyError: no tensor of that name. ChecksumMismatch: the bytes differ from the
            stored CRC32C. NotSupported: this torch has no dtype for it. ValueError: the file
            is closed. TransferError: the read failed.
        """
        r = self._reader()
        e = self._entry(name)
        dev = self._device
        alloc = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
        t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device=alloc)
        r.read([(e, t, 0, 0)], verify=self._verify, progress=self._part())
        return t if alloc == dev else t.to(dev)

    def get_slice(self, name: str) -> "TensorSlice":
        """A lazy view of one tensor: nothing is read until it is indexed.

        Args:
            name: the tensor's name.

        Returns:
            A TensorSlice: ``get_shape()``, ``get_dtype()``, and ``[index]`` (ints, slices with
            positive steps, ``...``), which fetches only the bytes it selects.

        Raises:
            KeyError: no tensor of that name. ValueError: the file is closed.
        """
        return TensorSlice(self, self._entry(name))

    def _part(self) -> ProgressArg:
        return self._prog.part() if self._prog is not None else False

    def close(self) -> None:
        """Closes the file (the C reader and its connections' use); idempotent."""
        r, self._r = self._r, None
        if r is not None:
            r.close()
        prog, self._prog = self._prog, None
        if prog is not None:
            prog.__exit__(None)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorSlice:
    """What safe_open.get_slice returns (safetensors' PySafeSlice).

    Args:
        f: the open safe_open.
        e: the tensor's entry.
    """

    def __init__(self, f: safe_open, e: TensorEntry) -> None:
        self._f = f
        self._e = e

    def get_shape(self) -> List[int]:
        """The tensor's shape, as a list."""
        return list(self._e.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype string ("F32", "BF16", ...)."""
        return _dtypes.name(self._e.dtype)

    def __len__(self) -> int:
        if not self._e.shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self._e.shape[0])

    def __getitem__(self, index: Any) -> torch.Tensor:
        """Reads the selected elements only.

        Args:
            index: as torch indexes a tensor: ints (negative counts from the end), slices with
                positive steps, ``...``, ``None`` and bools (new dimensions), lists, arrays
                and integer or boolean tensors (advanced indexing), or a tuple of them. The
                bytes read are those of the block that bounds the selection.

        Returns:
            A new contiguous tensor on the safe_open's device.

        Raises:
            IndexError: out of range, too many indices or two ellipses. ValueError: a step
            that is not positive, or the file is closed. TypeError: another kind of index.
        """
        f, e = self._f, self._e
        r = f._reader()
        shape = list(e.shape)
        adv = _advanced(index, shape, r.uri, e.name)
        if adv is not None:
            # None, bools, lists and index tensors (torch's indexing, as safetensors has it):
            # read the block that bounds the selection, then index it in memory.
            bounds, rel = adv
            return self._basic(bounds)[rel].contiguous()
        return self._basic(index)

    def _basic(self, index: Any) -> torch.Tensor:
        f, e = self._f, self._e
        r = f._reader()
        dtype = e.torch_dtype(r.uri)
        shape = list(e.shape)
        sel = _normalize(index, shape, r.uri, e.name)  # per dim: (start, stop, step, is_int)
        esize = torch.empty((), dtype=dtype).element_size()
        # d: the innermost dim that is not taken whole; the dims after it are contiguous.
        d = len(shape) - 1
        while d >= 0 and sel[d][0] == 0 and sel[d][1] == shape[d] and sel[d][2] == 1:
            d -= 1
        dev = f._device
        alloc = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
        counts = [len(range(*s[:3])) for s in sel]
        if any(c == 0 for c in counts) or d < 0:
            if any(c == 0 for c in counts):
                out = torch.empty(
                    [c for c, s in zip(counts, sel) if not s[3]], dtype=dtype, device=alloc
                )
                return out if alloc == dev else out.to(dev)
            d = -1  # everything selected whole: one range
        inner = math.prod(shape[d + 1 :]) if d + 1 < len(shape) else 1
        strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
        if d >= 0:
            lo, hi = sel[d][0], sel[d][0] + (counts[d] - 1) * sel[d][2] + 1  # bounding range
            outer = [range(*sel[i][:3]) for i in range(d)]
            nruns = math.prod(counts[:d]) if d else 1
            if nruns > _MAX_RUNS:
                # Too many small runs: read the rows that bound the selection, index in memory.
                first = sel[0][0]
                last = sel[0][0] + (counts[0] - 1) * sel[0][2]
                sub = self._read_runs(
                    r,
                    e,
                    [first * strides[0] * esize],
                    (last - first + 1) * strides[0] * esize,
                    alloc,
                    self._f._part(),
                )
                sub = sub.view(dtype).reshape([last - first + 1] + shape[1:])
                idx = [slice(None, None, sel[0][2])] + [slice(s[0], s[1], s[2]) for s in sel[1:]]
                out = sub[tuple(idx)]
                out = _squeeze_ints(out, sel)
                out = out.contiguous()
                return out if alloc == dev else out.to(dev)
            run_elems = (hi - lo) * inner
            offsets = []
            for pos in _product(outer):
                base = sum(p * strides[i] for i, p in enumerate(pos)) + lo * strides[d]
                offsets.append(base * esize)
            buf = self._read_runs(r, e, offsets, run_elems * esize, alloc, self._f._part())
            out = buf.view(dtype).reshape(counts[:d] + [hi - lo] + shape[d + 1 :])
            if sel[d][2] != 1:
                idx = [slice(None)] * d + [slice(None, None, sel[d][2])]
                out = out[tuple(idx)]
        else:
            buf = self._read_runs(r, e, [0], e.nbytes, alloc, self._f._part())
            out = buf.view(dtype).reshape(shape)
        out = _squeeze_ints(out, sel).contiguous()
        return out if alloc == dev else out.to(dev)

    @staticmethod
    def _read_runs(
        r: CheckpointReader,
        e: TensorEntry,
        offsets: List[int],
        length: int,
        device: torch.device,
        progress: ProgressArg = False,
    ) -> torch.Tensor:
        """Reads `length` bytes at each offset of the tensor into one buffer, back to back."""
        buf = torch.empty(len(offsets) * length, dtype=torch.uint8, device=device)
        if length:
            dests = [
                (e, buf[i * length : (i + 1) * length], off, length)
                for i, off in enumerate(offsets)
            ]
            r.read(dests, verify=False, progress=progress)
        return buf


def _product(ranges: List[range]) -> Any:
    if not ranges:
        yield ()
        return
    for v in ranges[0]:
        for rest in _product(ranges[1:]):
            yield (v,) + rest


def _squeeze_ints(t: torch.Tensor, sel: List[Tuple[int, int, int, bool]]) -> torch.Tensor:
    idx = tuple(0 if s[3] else slice(None) for s in sel)
    return t[idx] if any(s[3] for s in sel) else t


def _is_advanced(i: Any) -> bool:
    if i is None or isinstance(i, (bool, list)):
        return True
    if isinstance(i, torch.Tensor):
        return i.dim() > 0 or i.dtype == torch.bool
    return type(i).__module__ == "numpy" and hasattr(i, "shape") and len(i.shape) > 0


def _advanced(
    index: Any, shape: List[int], uri: str, name: str
) -> Optional[Tuple[Tuple[slice, ...], Tuple[Any, ...]]]:
    """For an index with None, bools, lists or index tensors: (the step-1 slices of the block
    that bounds the selection, the index that selects it from that block). None for an index
    of ints, slices and ... only."""
    if isinstance(index, list) and any(
        i is None
        or i is Ellipsis
        or isinstance(i, (list, tuple, slice, torch.Tensor))
        or hasattr(i, "shape")
        for i in index
    ):
        # torch (and so safetensors) reads a list holding sequences, slices, None or ... as
        # a tuple of indices: x[[[1, 0]]] is x[[1, 0]], not a 2-d index.
        index = tuple(index)
    items = index if isinstance(index, tuple) else (index,)
    if not any(_is_advanced(i) for i in items):
        return None
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    conv = [_as_index_item(i, uri, name) for i in items]
    used = sum(_dims_of(i) for i in conv)
    if used > len(shape):
        raise IndexError(f"{uri}: {name} has {len(shape)} dimensions, the index uses {used}")
    expanded: List[Any] = []
    for i in conv:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - used))
        else:
            expanded.append(i)
    bounds: List[slice] = []
    rel: List[Any] = []
    dim = 0
    for i in expanded:
        k = _dims_of(i)
        if k == 0:
            rel.append(i)
            continue
        b, r = _bound(i, k, shape, dim, uri, name)
        bounds.extend(b)
        rel.append(r)
        dim += k
    return tuple(bounds), tuple(rel)


def _as_index_item(i: Any, uri: str, name: str) -> Any:
    """An item of an advanced index with lists and arrays as tensors."""
    if isinstance(i, list) or (
        _is_advanced(i) and i is not None and not isinstance(i, (bool, torch.Tensor))
    ):
        try:
            i = torch.as_tensor(i)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{uri}: {name}: unsupported index {i!r:.60}") from err
        if i.numel() == 0:
            i = i.to(torch.int64)  # x[[]]: an empty selection, as torch gives it
    return i


def _dims_of(i: Any) -> int:
    """How many dimensions of the tensor an index item consumes."""
    if i is None or i is Ellipsis or isinstance(i, bool):
        return 0
    if isinstance(i, torch.Tensor) and i.dtype == torch.bool:
        return max(i.dim(), 1)
    return 1


def _bound(
    i: Any, k: int, shape: List[int], dim: int, uri: str, name: str
) -> Tuple[List[slice], Any]:
    """For index item i at dimension dim (consuming k dimensions): the step-1 slices that
    bound what it selects, and the item that selects it from those."""
    if isinstance(i, torch.Tensor) and i.dtype == torch.bool:
        want = shape[dim : dim + k] if i.dim() else [1]
        if i.dim() and list(i.shape) != want:
            raise IndexError(
                f"{uri}: {name}: boolean index of shape {list(i.shape)} does "
                f"not match dimensions {dim}.. of size {want}"
            )
        return [slice(None) for _ in range(k)], i
    if isinstance(i, torch.Tensor):
        if i.is_floating_point() or i.is_complex():
            raise IndexError(f"{uri}: {name}: tensors used as indices must be integer or boolean")
        n = shape[dim]
        t = i.to(torch.int64)
        if t.numel() and (int(t.min()) < -n or int(t.max()) >= n):
            raise IndexError(
                f"{uri}: {name}: an index is out of range for dimension {dim} of size {n}"
            )
        t = torch.remainder(t, n) if n else t
        lo = int(t.min()) if t.numel() else 0
        hi = int(t.max()) + 1 if t.numel() else 0
        return [slice(lo, hi)], t - lo
    if isinstance(i, slice):
        start, stop, step = i.indices(shape[dim])
        if step <= 0:
            raise ValueError(f"{uri}: {name}: slice steps must be positive")
        count = len(range(start, stop, step))
        if count == 0:
            return [slice(0, 0)], slice(None, None, step)
        return [slice(start, start + (count - 1) * step + 1)], slice(None, None, step)
    sel = _normalize((i,), [shape[dim]], uri, name)[0]  # an int: checked there
    return [slice(sel[0], sel[0] + 1)], 0


def _normalize(
    index: Any, shape: List[int], uri: str, name: str
) -> List[Tuple[int, int, int, bool]]:
    if not isinstance(index, tuple):
        index = (index,)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for i in index if i is not Ellipsis)
    if n_real > len(shape):
        raise IndexError(f"{uri}: {name} has {len(shape)} dimensions, the index has {n_real}")
    expanded: List[Any] = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - n_real))
        else:
            expanded.append(i)
    expanded.extend([slice(None)] * (len(shape) - len(expanded)))
    out = []
    for dim, (i, n) in enumerate(zip(expanded, shape)):
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step <= 0:
                raise ValueError(f"{uri}: {name}: slice steps must be positive")
            if stop < start:
                stop = start
            out.append((start, stop, step, False))
        elif isinstance(i, int) or (
            isinstance(i, torch.Tensor) and i.dim() == 0 and not i.is_floating_point()
        ):
            k = int(i)
            if k < -n or k >= n:
                raise IndexError(
                    f"{uri}: {name}: index {k} is out of range for dimension {dim} of size {n}"
                )
            k %= n
            out.append((k, k + 1, 1, True))
        else:
            raise TypeError(f"{uri}: {name}: unsupported index {i!r} (ints, slices and ... are)")
    return out
