"""stream(): tensors as they arrive, in the order the caller needs them (issue 36).

One planned read of every chosen tensor runs in a helper thread (the C call releases the GIL);
the C reader reports each destination as soon as its bytes are in place and checked
(s3d_read_options.on_ready, on the helper thread), and the iterator yields it. The requests
start in the order asked for, so the first tensors are also fetched first. Tensors are
allocated before the read (their pages are touched only when their bytes arrive) and the
iterator keeps no reference to one it has yielded: a tensor the caller drops is freed.

With group= the checkpoint is read once across the ranks (as load(group=)), in windows of
whole tensors in file order: each window is one shared read (_ranks.Session), yielded once it
has landed; the ranks must iterate in step (the collective reads run inside next()).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, Tuple, Union

import torch

from . import _capi, _interrupt, _ranks, errors
from ._bulkload import Dests, dest_device
from ._checkpoint import DeviceArg, _device, _map_location, _select, _shared
from ._progress import Progress, ProgressArg
from ._reader import CheckpointReader, _cuda_streams, _set_streams
from ._types import TensorEntry
from ._uri import PathLike
from .client import Client

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

OrderArg = Union[None, Sequence[str], Callable[[str], Any]]

# group=: bytes of whole tensors per shared read (a window ends after the tensor that reaches
# it). Memory is not bounded by it (every destination is allocated up front, as for load);
# it is the step of the ranks' exchange and the delay before the first tensor.
GROUP_WINDOW = 256 << 20

_POLL_S = 0.05  # how often a waiting next() lets a signal handler (Ctrl-C) run


def _ordered(
    r: CheckpointReader, keys: Union[str, Sequence[str], None], order: OrderArg
) -> list[TensorEntry]:
    """The entries to yield, in the order to yield them."""
    names = _select(r, [e.name for e in r.tensors], keys)
    if order is None:
        return [r.by_name[n] for n in names]
    if callable(order):
        return [r.by_name[n] for n in sorted(names, key=order)]
    if isinstance(order, (str, bytes)):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL, "order= takes a list of tensor names or a key function, not a string"
        )
    chosen = set(names)
    listed = list(dict.fromkeys(order))
    unknown = [n for n in listed if n not in r.by_name]
    if unknown:
        raise KeyError(
            f"{r.uri}: order= names tensors the checkpoint does not hold: "
            f"{', '.join(map(repr, unknown[:10]))}"
        )
    first = [n for n in listed if n in chosen]
    seen = set(first)
    return [r.by_name[n] for n in first + [n for n in names if n not in seen]]


def _read_in_thread(
    r: CheckpointReader,
    d: Dests,
    *,
    verify: bool,
    progress: ProgressArg,
    desc: str,
    ready: Callable[[Optional[int], int], int],
    cancel: _interrupt.Cancel,
    done: Callable[[Optional[BaseException]], None],
    name: str,
) -> Tuple[threading.Thread, Any]:
    """Starts one read of d from r on a helper thread, with on_ready calling ready(user,
    index) on that thread; done(None or the exception) runs there when the read returns.
    Returns the thread and the C callback, which must stay alive while the thread runs."""
    fn = _capi.READY_FN(ready)
    o = _capi.ReadOptions()
    o.struct_size = ctypes.sizeof(o)
    o.no_verify = 0 if verify else 1
    o.on_ready = fn
    o.cancel = cancel.handle
    keep: list[object] = []
    _set_streams(o, _cuda_streams(d.devices), keep)
    lib, use = r._lib, r._use
    prog = Progress(progress, desc)

    def work() -> None:
        err: Optional[BaseException] = None
        try:
            with prog:
                if prog.fn is not None:
                    o.progress = prog.fn
                if d.n:
                    with use() as h:
                        lib.check(lib.s3d_reader_read(h, d.arr, d.n, ctypes.byref(o)))
        except BaseException as e:  # handed to done(), raised in the caller's thread
            err = e
        keep.clear()
        done(err)

    t = threading.Thread(target=work, name=name, daemon=True)
    t.start()
    return t, fn


class TensorStream:
    """The iterator stream() returns: (name, tensor) pairs as the tensors arrive. Also a
    context manager; close() (or leaving a for loop early, or dropping it) cancels what is
    still in flight and waits for it. Made by stream().

    Args:
        uri, device, keys, order, client, group, verify, progress, map_location: as for
            stream().
    """

    def __init__(
        self,
        uri: PathLike,
        *,
        device: DeviceArg,
        keys: Union[str, Sequence[str], None],
        order: OrderArg,
        client: Optional[Client],
        group: Optional["ProcessGroup"],
        verify: bool,
        progress: ProgressArg,
        map_location: DeviceArg,
    ) -> None:
        self._r: Optional[CheckpointReader] = None
        self._queue: "queue.SimpleQueue[Tuple[str, Any]]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._cancel: Optional[_interrupt.Cancel] = None
        self._stop = False
        self._tensors: list[Optional[torch.Tensor]] = []
        self._finished = False
        device = _map_location(device, map_location)
        self._dev = _device("cpu" if device is None else device)
        self._alloc_dev = self._dev if self._dev.type in ("cpu", "cuda") else torch.device("cpu")
        self._group = group
        if group is not None and order is not None:
            raise errors.InvalidArgument(
                errors.S3D_EINVAL,
                "stream(group=) yields in file order (every rank reads the same windows); "
                "order= cannot be combined with group=",
            )
        self._verify, self._progress = verify, progress
        self._r = CheckpointReader(uri, client)
        self.uri = self._r.uri
        try:
            self._entries = _ordered(self._r, keys, order)
        except BaseException:
            self.close()
            raise
        self._left = len(self._entries)  # entries not yet yielded
        self._ready: Optional[Any] = None  # the C callback, alive while the read runs
        self._windows: Optional[Iterator[list[int]]] = None

    # ---- the single-process read -------------------------------------------------------------
    def _start(self) -> None:
        r = self._r
        assert r is not None
        self._tensors = [
            torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device=self._alloc_dev)
            for e in self._entries
        ]
        d = Dests(len(self._entries))
        for e, t in zip(self._entries, self._tensors):
            assert t is not None
            d.add(e.index, t, dest_device(t))
        q = self._queue

        def ready(_user: Optional[int], i: int) -> int:
            if self._stop:
                return 1
            q.put(("t", i))
            return 0

        def done(err: Optional[BaseException]) -> None:
            q.put(("done", None) if err is None else ("error", err))  # raised by next()

        self._cancel = _interrupt.Cancel()
        self._thread, self._ready = _read_in_thread(
            r,
            d,
            verify=self._verify,
            progress=self._progress,
            desc=f"stream {os.path.basename(self.uri)}",
            ready=ready,
            cancel=self._cancel,
            done=done,
            name="s3direct-stream",
        )

    def _get(self) -> Tuple[str, Any]:
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue

    def _next_single(self) -> Tuple[str, torch.Tensor]:
        if self._thread is None:
            self._start()
        while True:
            kind, val = self._get()
            if kind == "t":
                t = self._tensors[val]
                self._tensors[val] = None  # the caller holds the only reference
                self._left -= 1
                assert t is not None
                if self._alloc_dev != self._dev:
                    t = t.to(self._dev)
                return self._entries[val].name, t
            if kind == "error":
                self._join()
                raise val
            self._join()  # "done": every destination has been reported before it
            raise StopIteration

    # ---- group=: windows of shared reads -----------------------------------------------------
    def _window_plan(self) -> Iterator[list[int]]:
        """Windows over every tensor of the checkpoint in file order (the same on every rank,
        whatever keys each passes); each window lists the positions in self._entries it
        holds (possibly none on this rank)."""
        r = self._r
        assert r is not None
        pos = {e.index: k for k, e in enumerate(self._entries)}
        mine: list[int] = []
        size = 0
        for e in r.tensors:
            if e.index in pos:
                mine.append(pos[e.index])
            size += e.nbytes
            if size >= GROUP_WINDOW:
                yield mine
                mine, size = [], 0
        yield mine

    def _next_group(self) -> Tuple[str, torch.Tensor]:
        r = self._r
        assert r is not None and self._group is not None
        if self._windows is None:
            self._windows = self._window_plan()
        while self._queue.empty():
            window = next(self._windows, None)
            if window is None:
                raise StopIteration
            dests = []
            for k in window:
                e = self._entries[k]
                t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device=self._alloc_dev)
                dests.append((e, t, 0, 0))
            sess = _ranks.Session(self._group, f"stream {self.uri}")
            with _shared(sess):
                sess.read(r, dests, progress=self._progress, verify=self._verify)
            for k, (_, t, _, _) in zip(window, dests):
                self._queue.put(("g", (k, t)))
            del dests
        _, (k, t) = self._queue.get_nowait()
        self._left -= 1
        if self._alloc_dev != self._dev:
            t = t.to(self._dev)
        return self._entries[k].name, t

    # ---- the iterator ------------------------------------------------------------------------
    def __iter__(self) -> TensorStream:
        return self

    def __next__(self) -> Tuple[str, torch.Tensor]:
        if self._finished:
            raise StopIteration
        try:
            if self._group is not None:
                return self._next_group()
            return self._next_single()
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        """Tensors still to come."""
        return self._left

    def close(self) -> None:
        """Stops the read (what is in flight is cancelled), waits for it, frees what was not
        yielded. Idempotent."""
        self._finished = True
        self._stop = True
        if self._cancel is not None and self._thread is not None and self._thread.is_alive():
            self._cancel.request()
        self._join()
        self._tensors = []
        r, self._r = self._r, None
        if r is not None:
            r.close()

    def _join(self) -> None:
        t = self._thread
        if t is None:
            return
        while t.is_alive():
            try:
                t.join(_POLL_S)
            except KeyboardInterrupt:  # the cleanup must finish: the C read is writing
                if self._cancel is not None:
                    self._cancel.request()
        self._thread = None
        self._ready = None
        c, self._cancel = self._cancel, None
        if c is not None:
            c.close()

    def __enter__(self) -> TensorStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def stream(
    uri: PathLike,
    *,
    device: DeviceArg = None,
    keys: Union[str, Sequence[str], None] = None,
    order: OrderArg = None,
    client: Optional[Client] = None,
    group: Optional["ProcessGroup"] = None,
    verify: bool = True,
    progress: ProgressArg = False,
    map_location: DeviceArg = None,
) -> TensorStream:
    """Yields (name, tensor) for each stored tensor as soon as its bytes have arrived, while
    the others are still on the network: start work on the first layers early, or feed a
    serving engine's load_weights(iterable).

    Args:
        uri: as for load(): an object, a local file, a sharded index or a model folder.
        device: where tensors are allocated ("cpu", "cuda", "cuda:N"; map_location is an
            alias). A tensor on a GPU is yielded once its copy there has completed.
        keys: tensor names or prefixes: only those tensors are fetched and yielded.
        order: the order to fetch and yield in: None (file order), a list of names (those
            first, in that order; the other chosen tensors after them in file order), or a key
            function of the name (as for sorted()). Requests start in this order.
        client: the Client to use. verify: check each tensor's CRC-32C before it is yielded.
        group: a torch.distributed process group whose ranks all stream with it: the
            checkpoint is read once across the group (as load(group=)), in windows of whole
            tensors in file order; ranks must iterate in step. Not with order=.
        progress: True (bar or summary line) or a callable(done_bytes, total_bytes).

    Returns:
        A TensorStream: an iterator of (name, tensor), also a context manager. Leaving the
        loop early (break, an exception, close()) cancels the requests still in flight.

    Raises:
        As load(), at the call (opening the checkpoint) or from next() (a transfer error,
        ChecksumMismatch naming the tensor; the tensors yielded before it are intact).
    """
    return TensorStream(
        uri,
        device=device,
        keys=keys,
        order=order,
        client=client,
        group=group,
        verify=verify,
        progress=progress,
        map_location=map_location,
    )


class LoadHandle:
    """What load_into(..., wait=False) returns while the bytes arrive: ready(name) and
    wait(name) for one tensor, wait() for the whole result. A tensor is ready once its bytes
    are in the target, checked (CRC-32C), and for a GPU target once its copy has completed
    on the device: it may then be used on any stream, while the others are still in flight.
    Also a context manager (leaving it waits); cancel() stops the read.

    Args:
        r: the open checkpoint (the handle closes it).
        plan: load_into's plan (_into.IntoPlan).
        progress, verify: as for load_into().
    """

    def __init__(
        self, r: CheckpointReader, plan: Any, *, progress: ProgressArg, verify: bool
    ) -> None:
        self._r: Optional[CheckpointReader] = r
        self.uri = r.uri
        self._plan = plan
        self._cond = threading.Condition()
        self._ready = bytearray(len(plan.dests))
        self._where: dict[str, int] = {}
        for k, name in enumerate(plan.names):
            self._where.setdefault(name, k)
        self._error: Optional[BaseException] = None
        self._finished = False  # the read returned (well or not)
        self._result: Any = None
        self._has_result = False
        self._stop = False
        self._cancel: Optional[_interrupt.Cancel] = _interrupt.Cancel()
        d = Dests(len(plan.dests))
        for e, t, off, length in plan.dests:
            d.add(e.index, t, dest_device(t), off, length)

        def ready(_user: Optional[int], k: int) -> int:
            with self._cond:
                self._ready[k] = 1
                self._cond.notify_all()
            return 1 if self._stop else 0

        def done(err: Optional[BaseException]) -> None:
            with self._cond:
                self._error = err
                self._finished = True
                self._cond.notify_all()

        self._thread: Optional[threading.Thread]
        self._thread, self._fn = _read_in_thread(
            r,
            d,
            verify=verify,
            progress=progress,
            desc=f"load {os.path.basename(self.uri)}",
            ready=ready,
            cancel=self._cancel,
            done=done,
            name="s3direct-load-into",
        )

    def _index(self, name: str) -> int:
        k = self._where.get(name)
        if k is None:
            raise KeyError(f"{self.uri}: load_into reads no tensor called {name!r} into the target")
        return k

    def ready(self, name: str) -> bool:
        """Whether the tensor that load_into fills under name is in place.

        Args:
            name: a tensor name as save() gives it.

        Returns:
            True once its bytes are in the target (checked, GPU copy complete).
        """
        k = self._index(name)
        with self._cond:
            return bool(self._ready[k])

    def done(self) -> bool:
        """True once the read has ended (wait() then returns or raises at once)."""
        with self._cond:
            return self._finished

    def _block(self, cond: Callable[[], bool], timeout: Optional[float]) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not cond():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                # In slices: Ctrl-C in the main thread raises while it waits.
                self._cond.wait(_POLL_S if left is None else min(left, _POLL_S))
        return True

    def wait(self, name: Optional[str] = None, timeout: Optional[float] = None) -> Any:
        """Waits for one tensor (name) and returns it, or for the whole load (no name) and
        returns what load_into would have returned.

        Args:
            name: a tensor name as save() gives it ("model.layer.weight"); None: everything.
            timeout: seconds; TimeoutError when it passes first.

        Returns:
            The target's tensor, now filled; or load_into's result.

        Raises:
            The read's error (ChecksumMismatch naming the tensor, a transfer error), when it
            failed before that tensor was in place; KeyError for a name it does not read.
        """
        if name is not None:
            k = self._index(name)
            if not self._block(lambda: bool(self._ready[k]) or self._finished, timeout):
                raise TimeoutError(f"{self.uri}: {name} not in place after {timeout} s")
            with self._cond:
                ok = bool(self._ready[k])
            if not ok:
                self._raise()
                raise errors.S3DirectError(
                    errors._CODES["EIO"], f"{self.uri}: the read ended without {name}"
                )
            self._plan.copy(k)
            t: torch.Tensor = self._plan.result.get(name, self._plan.dests[k][1])
            return t
        if not self._block(lambda: self._finished, timeout):
            raise TimeoutError(f"{self.uri}: load_into not finished after {timeout} s")
        self._raise()
        if not self._has_result:
            self._close_reader()
            self._result = self._plan.finish(self.uri)
            self._has_result = True
        return self._result

    def _raise(self) -> None:
        with self._cond:
            err = self._error
        if err is not None:
            self._close_reader()
            raise err

    def cancel(self) -> None:
        """Stops the read (the tensors not yet in place keep unspecified bytes) and waits for
        it to end. wait() then raises Cancelled."""
        self._stop = True
        c = self._cancel
        if c is not None and not self.done():
            c.request()
        self._block(lambda: self._finished, None)
        self._close_reader()

    def _close_reader(self) -> None:
        t, self._thread = self._thread, None
        if t is not None:
            t.join()
        c, self._cancel = self._cancel, None
        if c is not None:
            c.close()
        r, self._r = self._r, None
        if r is not None:
            r.close()

    def __enter__(self) -> LoadHandle:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.wait()
        else:
            self.cancel()

    def __del__(self) -> None:
        try:
            if getattr(self, "_thread", None) is not None:
                self.cancel()
        except Exception:
            pass
