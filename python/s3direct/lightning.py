"""Lightning checkpoints as safetensors on S3 or local disk: S3DirectCheckpointIO, a
``lightning.pytorch`` CheckpointIO plugin (the place of s3torchconnector's
S3LightningCheckpoint).

    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from s3direct.lightning import S3DirectCheckpointIO

    trainer = Trainer(plugins=[S3DirectCheckpointIO()],
                      callbacks=[ModelCheckpoint(dirpath="s3://bucket/ckpts", save_last=True)])
    trainer.fit(model, ckpt_path="s3://bucket/ckpts/last.ckpt")

Each checkpoint is one safetensors object written by s3direct.save: the tensors (weights,
optimizer state) as safetensors tensors, the rest of Lightning's dictionary (epoch, loops,
callback and scheduler state, hyper-parameters) as the JSON tree in ``__metadata__``. Nothing
is pickled unless allow_pickle=True, so a checkpoint from elsewhere cannot run code on load,
and ``safetensors.safe_open`` reads its tensors. Lightning's hyper-parameter AttributeDict is
stored as a plain dict (Lightning reads it back as one).

Saves are incremental: each uses the checkpoint the plugin wrote before it in this process
as its base (s3direct.save(base=)), so the tensors that did not change (frozen weights,
embeddings) are copied from it, not sent again.

Lightning itself is imported when this module is: ``import s3direct`` never imports it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, Mapping, Optional, cast

import torch

from . import _checkpoint, _save, _uri, errors, streams
from ._uri import PathLike
from .client import Client, resolve

# Imported by name, as _progress imports tqdm: mypy then sees the same module with lightning
# installed or not (the base class is Any either way), and lightning's own annotations cannot
# turn a lightning upgrade into a type error of this package.
_plugins_io: Any = importlib.import_module("lightning.pytorch.plugins.io")
_CheckpointIO: Any = _plugins_io.CheckpointIO
_AttributeDict: Any = importlib.import_module("lightning.fabric.utilities.data").AttributeDict
_ModelCheckpoint: Any = importlib.import_module("lightning.pytorch.callbacks").ModelCheckpoint

__all__ = ["ModelCheckpoint", "S3DirectCheckpointIO"]

# storage_options keys passed on to s3direct.save (shard_size is not: a sharded checkpoint
# is an index plus shards, and Lightning names one file per checkpoint).
_SAVE_OPTIONS = ("metadata", "checksum", "progress")


def _plain(obj: Any, active: set[int]) -> Any:
    """obj with every Lightning AttributeDict in it made a plain dict (the s3direct tree
    stores dict, OrderedDict, list and tuple, and refuses other dict subclasses). Containers
    are copied only where something under them changed; the caller's dictionary is never
    modified (AsyncCheckpointIO hands the same one to its thread)."""
    t = type(obj)
    attr = isinstance(obj, _AttributeDict)
    if not attr and t not in (dict, OrderedDict, list, tuple):
        return obj
    if id(obj) in active:
        return obj  # a cycle: s3direct.save names its path
    active.add(id(obj))
    try:
        if t is list or t is tuple:
            items = [_plain(v, active) for v in obj]
            if all(a is b for a, b in zip(items, obj)):
                return obj
            return items if t is list else tuple(items)
        pairs = [(k, _plain(v, active)) for k, v in obj.items()]
        if not attr and all(v is obj[k] for k, v in pairs):
            return obj
        return OrderedDict(pairs) if t is OrderedDict else dict(pairs)
    finally:
        active.discard(id(obj))


class S3DirectCheckpointIO(_CheckpointIO):  # type: ignore[misc]  # Any: lightning by name
    """A Lightning CheckpointIO that saves with s3direct.save and loads with s3direct.load:
    one safetensors object per checkpoint, on S3 (``s3://bucket/key``) or a local path.
    Give it to the Trainer, ``Trainer(plugins=[S3DirectCheckpointIO()])``; ModelCheckpoint
    and ``fit(ckpt_path=...)`` then go through it. For saves in a background thread wrap it:
    ``AsyncCheckpointIO(S3DirectCheckpointIO())``.

    The checkpoint is read back by this plugin (``trainer.fit / validate / test(ckpt_path=)``)
    or by ``s3direct.load(path)``; ``LightningModule.load_from_checkpoint`` and
    ``torch.load`` expect a torch.save file and do not read it (load the weights with
    ``model.load_state_dict(s3direct.load(path)["state_dict"])``).

    Args:
        region: the bucket's region, as S3LightningCheckpoint's first argument (None: resolved
            as the AWS CLI does). Used for the plugin's own Client, with endpoint_url.
        endpoint_url: the S3 server (None: AWS_ENDPOINT_URL, the profile, else AWS).
        client: an s3direct.Client to use instead (not together with region or
            endpoint_url). The plugin does not close a client it was given.
        allow_pickle: pickle the leaves JSON cannot hold (an argparse.Namespace or a class
            in the hyper-parameters, a callback's custom object) and accept pickled leaves on
            load. Off by default: then saving such a leaf raises InvalidArgument naming it,
            and a pickled checkpoint is refused on load (PickleRefused).
        verify: check each tensor's CRC32C on load.
        incremental: save each checkpoint with the previous one this plugin wrote in this
            process as its base: the unchanged tensors are copied from it (S3:
            UploadPartCopy; local: copy_file_range) instead of sent. A checkpoint
            remove_checkpoint deleted is never a base; remove_checkpoint of the base of a
            save that is running (AsyncCheckpointIO) waits for that save. False: every save
            sends everything.

    Raises:
        ValueError: client given together with region or endpoint_url.
    """

    def __init__(
        self,
        region: Optional[str] = None,
        *,
        endpoint_url: Optional[str] = None,
        client: Optional[Client] = None,
        allow_pickle: bool = False,
        verify: bool = True,
        incremental: bool = True,
    ) -> None:
        super().__init__()
        if client is not None and (region is not None or endpoint_url is not None):
            raise ValueError(
                "S3DirectCheckpointIO: give client, or region / endpoint_url for "
                "a Client it makes, not both"
            )
        self.region = region
        self.endpoint_url = endpoint_url
        self.allow_pickle = allow_pickle
        self.verify = verify
        self.incremental = incremental
        self._given = client
        self._own: Optional[Client] = None
        self._init_bases()

    def _init_bases(self) -> None:
        # The base of the next save: the last checkpoint saved (its _key), and the bases the
        # running saves read, which remove_checkpoint waits for. Saves run in Lightning's
        # thread or AsyncCheckpointIO's, removals in Lightning's: _bases guards both.
        self._bases = threading.Condition(threading.Lock())
        self._last: Optional[str] = None
        self._reading: Dict[str, int] = {}

    def __getstate__(self) -> Dict[str, Any]:
        """What pickling carries (a spawned strategy's copy): the settings, not the lock
        or the previous checkpoint (a new process starts with a full save)."""
        state = dict(self.__dict__)
        for k in ("_bases", "_last", "_reading"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """Restores the settings and starts with no base.

        Args:
            state: what __getstate__ returned.
        """
        self.__dict__.update(state)
        self._init_bases()

    # ---- the client -------------------------------------------------------------------------
    def _client(self) -> Client:
        """The client given, else the plugin's own (made on first use from region and
        endpoint_url; teardown closes it), else the process's default client."""
        if self._given is not None:
            return self._given
        if self.region is None and self.endpoint_url is None:
            return resolve(None)
        if self._own is None or not self._own.is_open:
            self._own = Client(endpoint_url=self.endpoint_url, region=self.region)
        return self._own

    @staticmethod
    def _path(path: PathLike) -> str:
        """The s3:// URI or local path (file:// URIs as their path); ConfigError for a scheme
        s3direct does not serve (gs://, https://)."""
        return _uri.normalize(path)

    # ---- CheckpointIO -----------------------------------------------------------------------
    def save_checkpoint(
        self, checkpoint: Dict[str, Any], path: PathLike, storage_options: Optional[Any] = None
    ) -> None:
        """Saves Lightning's checkpoint dictionary as one safetensors object or file (parent
        folders of a local path are made); with incremental, against the previous checkpoint
        this plugin saved (not one remove_checkpoint deleted since).

        Args:
            checkpoint: the dictionary Lightning built (state_dict, optimizer_states, loops,
                callbacks, hyper_parameters...).
            path: "s3://bucket/key.ckpt" or a local path.
            storage_options: None, or a dict of s3direct.save options: "metadata" (str ->
                str entries for __metadata__), "checksum" (bool), "progress" (True or a
                callable(done_bytes, total_bytes)).

        Raises:
            TypeError: storage_options is not a dict of those keys.
            InvalidArgument: a leaf JSON cannot hold while allow_pickle is off (its path
                named), or a tensor safetensors cannot store.
            NoSuchBucket, AccessDenied, TransferError: from the storage.
        """
        opts = self._save_options(storage_options)
        uri = self._path(path)
        if not streams.is_s3(uri):
            parent = os.path.dirname(uri)
            if parent:
                os.makedirs(parent, exist_ok=True)
        state = _plain(checkpoint, set())
        with self._bases:
            base = self._last if self.incremental else None
            if base is not None:
                self._reading[base] = self._reading.get(base, 0) + 1
        try:
            _save.save(
                state, uri, client=self._client(), allow_pickle=self.allow_pickle, base=base, **opts
            )
            with self._bases:
                self._last = _key(uri)
        except errors.InvalidArgument as e:
            if self.allow_pickle or "allow_pickle=True" not in e.message:
                raise
            raise errors.InvalidArgument(
                e.code,
                f"{e.message}; for Lightning that is S3DirectCheckpointIO("
                f"allow_pickle=True) (then load only checkpoints you trust), or keep the leaf "
                f"out of the checkpoint, e.g. save_hyperparameters(ignore=[...])",
            ) from e
        finally:
            if base is not None:
                with self._bases:
                    left = self._reading[base] - 1
                    if left:
                        self._reading[base] = left
                    else:
                        del self._reading[base]
                    self._bases.notify_all()

    @staticmethod
    def _save_options(storage_options: Optional[Any]) -> Dict[str, Any]:
        if storage_options is None:
            return {}
        if not isinstance(storage_options, Mapping):
            raise TypeError(
                f"S3DirectCheckpointIO: storage_options must be a dict of "
                f"{', '.join(_SAVE_OPTIONS)}: {storage_options!r}"
            )
        unknown = [k for k in storage_options if k not in _SAVE_OPTIONS]
        if unknown:
            raise TypeError(
                f"S3DirectCheckpointIO: storage_options {unknown} not understood; "
                f"it takes {', '.join(_SAVE_OPTIONS)}"
            )
        return dict(storage_options)

    def load_checkpoint(
        self,
        path: PathLike,
        map_location: Optional[Any] = None,
        weights_only: Optional[bool] = None,
    ) -> Dict[str, Any]:
        """Loads a checkpoint this plugin (or s3direct.save) wrote.

        Args:
            path: "s3://bucket/key.ckpt" or a local path.
            map_location: where the tensors go: None (the CPU), a device ("cpu", "cuda:0",
                torch.device, int), or a function(storage, location) as torch.load takes,
                applied after loading with location "cpu" (the tensors are read to the
                CPU first). A dict (torch.load's remapping of recorded devices) is refused:
                the checkpoint records no device.
            weights_only: True refuses pickled leaves even with allow_pickle=True; None or
                False leave it to allow_pickle.

        Returns:
            The checkpoint dictionary, as Lightning saved it (hyper-parameters as a plain
            dict).

        Raises:
            InvalidArgument: map_location is a dict, or another kind load cannot follow.
            NoSuchKey / NoSuchFile: nothing at path (both are FileNotFoundError).
            FormatError: not a safetensors file (a torch.save checkpoint says so).
            PickleRefused: the checkpoint holds pickled leaves and pickling is not allowed.
        """
        device: Any = None
        after: Optional[Callable[[Any, str], Any]] = None
        if isinstance(map_location, Mapping):
            raise errors.InvalidArgument(
                errors.S3D_EINVAL,
                f"S3DirectCheckpointIO.load_checkpoint: map_location {map_location!r} remaps "
                f"the devices torch.save records; an s3direct checkpoint records none: pass "
                f'the device to load to ("cpu", "cuda:0")',
            )
        if callable(map_location):
            after = map_location
        else:
            device = map_location
        allow = self.allow_pickle and weights_only is not True
        out = _checkpoint.load(
            self._path(path),
            device=device,
            client=self._client(),
            allow_pickle=allow,
            verify=self.verify,
        )
        if not isinstance(out, dict):
            raise errors.FormatError(
                errors.S3D_EFMT_METADATA,
                f"{os.fspath(path)} holds a {type(out).__name__}, not a checkpoint dictionary",
            )
        if after is not None:
            return _map_storages(out, after)
        return cast(Dict[str, Any], out)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Deletes the checkpoint (a missing one is not an error, as in Lightning's own
        TorchCheckpointIO). A local folder at path (another plugin's sharded checkpoint) is
        removed whole, as TorchCheckpointIO does. When a save running in another thread
        (AsyncCheckpointIO) copies from this checkpoint as its base, waits for that save
        first; a removed checkpoint is never the base of a later save.

        Args:
            path: "s3://bucket/key.ckpt" or a local path.

        Raises:
            AccessDenied, TransferError: from S3; OSError from the local file system.
        """
        uri = self._path(path)
        key = _key(uri)
        with self._bases:
            if self._last == key:
                self._last = None  # never the base of a later save
            while self._reading.get(key):
                self._bases.wait()  # a running save copies from it
        if streams.is_s3(uri):
            self._client().delete(uri)
        elif os.path.isdir(uri) and not os.path.islink(uri):
            shutil.rmtree(uri)
        else:
            try:
                os.remove(uri)
            except FileNotFoundError:
                pass

    def teardown(self) -> None:
        """Closes the Client the plugin made (a later save or load makes a new one); a client
        that was given, and the default client, stay open."""
        own, self._own = self._own, None
        if own is not None:
            own.close()

    def __repr__(self) -> str:
        pairs = (
            ("region", self.region),
            ("endpoint_url", self.endpoint_url),
            ("client", self._given),
        )
        given: dict[str, object] = {k: v for k, v in pairs if v is not None}
        if self.allow_pickle:
            given["allow_pickle"] = True
        return f"S3DirectCheckpointIO({', '.join(f'{k}={v!r}' for k, v in given.items())})"


class ModelCheckpoint(_ModelCheckpoint):  # type: ignore[misc]  # Any: lightning by name
    """Lightning's ModelCheckpoint, with ``fit(ckpt_path="last")`` working when dirpath is an
    s3:// (or s3direct://, or any fsspec) URL: a drop-in for
    ``lightning.pytorch.callbacks.ModelCheckpoint``, the same arguments.

    Lightning 2.x finds "last" by listing dirpath through fsspec, whose names carry no
    protocol ("bucket/ckpts/last.ckpt", s3fs's too), and then looks for those names on the
    local disk: it finds nothing and trains from scratch with a warning. This class gives the
    names back with dirpath's protocol, so the newest last*.ckpt is found and resumed from.

    Example::

        from s3direct.lightning import ModelCheckpoint, S3DirectCheckpointIO
        trainer = Trainer(plugins=[S3DirectCheckpointIO()],
                          callbacks=[ModelCheckpoint(dirpath="s3://bucket/ckpts",
                                                     save_last=True)])
        trainer.fit(model, ckpt_path="last")
    """

    def _find_last_checkpoints(self, trainer: Any) -> set[str]:
        found: set[str] = super()._find_last_checkpoints(trainer)
        return {_with_protocol(p, self.dirpath, self._fs) for p in found}


def _with_protocol(name: str, dirpath: Any, fs: Any) -> str:
    """name as fsspec's ls gave it, with the protocol of dirpath (else of fs, when fs is not
    the local one) in front: "bucket/k" -> "s3://bucket/k"; local names as they are."""
    if "://" in name:
        return name
    d = str(dirpath) if dirpath is not None else ""
    if "://" in d:
        scheme = d.split("://", 1)[0]
    else:
        proto = getattr(fs, "protocol", "file")
        scheme = proto[0] if isinstance(proto, (tuple, list)) else str(proto)
        if scheme in ("file", "local"):
            return name
    return f"{scheme}://{name.lstrip('/')}"


def _key(uri: str) -> str:
    """One spelling per checkpoint, for comparing a removed path with the last saved one:
    S3 URIs as they are, local paths absolute. Also the base passed to s3direct.save."""
    return uri if streams.is_s3(uri) else os.path.abspath(uri)


def _map_storages(state: Dict[str, Any], fn: Callable[[Any, str], Any]) -> Dict[str, Any]:
    """Applies torch.load's map_location function to the storage of every tensor in state,
    with location "cpu"; tensors that shared a storage (tied weights) share the result."""
    apply_to_collection = importlib.import_module(
        "lightning_utilities.core.apply_func"
    ).apply_to_collection
    done: dict[int, Any] = {}

    def move(t: torch.Tensor) -> torch.Tensor:
        src = t.untyped_storage()
        key = src.data_ptr()
        if key == 0:
            return t  # no bytes to place
        if key not in done:
            done[key] = fn(src, "cpu")
        dst = done[key]
        if dst is None or dst is src:
            return t
        out = torch.empty(0, dtype=t.dtype, device=dst.device)
        out.set_(dst, t.storage_offset(), t.shape, t.stride())
        if isinstance(t, torch.nn.Parameter):
            return torch.nn.Parameter(out, requires_grad=t.requires_grad)
        return out

    result: Dict[str, Any] = apply_to_collection(state, torch.Tensor, move)
    return result
