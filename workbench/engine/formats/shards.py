"""``shards``: tar files in the WebDataset layout, read in sequence.

Each sample is three members of one tar, sharing a key (the sample's index in the source
ImageFolder, zero-padded): ``<key>.jpg`` (the JPEG as it was), ``<key>.cls`` (its class
index as text: WebDataset's convention, what other tools read) and ``<key>.lbl`` (the same
index as 8 little-endian bytes: what DALI's ``fn.readers.webdataset`` reads as an int64).
Samples are written in a seeded random order, so each shard mixes classes.

Reading (``ShardDataset``, the ``webdataset`` library's tar iterator): every epoch the shard
list is shuffled, split between ranks and then between loader workers, each worker reads its
shards front to back and shuffles within a buffer of ``SHUFFLE_BUFFER`` samples. That is how
TFRecord-style data is read: sequential I/O, a shuffle that is local rather than global.
Every sample is read once per epoch; with W workers each drops its own last partial batch.
"""

from __future__ import annotations

import itertools
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from workbench.engine.encoded import as_tensor
from workbench.engine.formats.manifest import FormatError, Manifest, decode_jpeg, open_checked

SHARD_NAME = "shard-{:05d}.tar"
SHUFFLE_BUFFER = 256
"""Samples each worker holds to shuffle within (encoded JPEGs: ~28 MB at 110 KB each)."""
SHARD_MB = 64.0
MIN_SHARDS = 16
"""At least this many shards (fewer only with fewer samples), so up to 16 loader workers
each get a shard of their own."""


def shard_sizes(count: int, total_bytes: int, shard_mb: float = SHARD_MB) -> list[int]:
    """Samples per shard: shards of about ``shard_mb``, at least ``MIN_SHARDS`` of them."""
    by_size = -(-total_bytes // max(1, int(shard_mb * 2**20)))
    n = max(1, min(count, max(MIN_SHARDS, by_size)))
    base, extra = divmod(count, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


class ShardWriter:
    """Writes samples into consecutive shards of the sizes ``shard_sizes`` gave."""

    def __init__(self, folder: Path, sizes: list[int]):
        # webdataset is optional (the data extra): only for data_format=shards
        import webdataset as wds

        self._wds = wds
        self.folder = folder
        self._sizes = sizes
        self._shard = -1
        self._left = 0
        self._tar: Any = None
        self.files: dict[str, int] = {}

    def write(self, index: int, label: int, jpeg: bytes) -> None:
        if self._left == 0:
            self._next_shard()
        key = f"{index:08d}"
        self._tar.write(
            {
                "__key__": key,
                "jpg": jpeg,
                "cls": str(label).encode(),
                "lbl": struct.pack("<q", label),
            }
        )
        self._left -= 1

    def _next_shard(self) -> None:
        self._close_shard()
        self._shard += 1
        self._left = self._sizes[self._shard]
        path = self.folder / SHARD_NAME.format(self._shard)
        self._tar = self._wds.TarWriter(str(path), encoder=False)

    def _close_shard(self) -> None:
        if self._tar is not None:
            self._tar.close()
            path = self.folder / SHARD_NAME.format(self._shard)
            self.files[path.name] = path.stat().st_size
            self._tar = None

    def close(self) -> dict[str, int]:
        self._close_shard()
        return self.files


def shard_paths(folder: Path, manifest: Manifest) -> list[str]:
    return [str(folder / name) for name in sorted(manifest.files)]


class ShardDataset(IterableDataset):
    """Samples ``(transform(image), label)`` from the shards, shuffled by shard and buffer
    (``encoded``: ``(JPEG bytes, label)``)."""

    def __init__(
        self,
        folder: str | Path,
        transform: Callable | None = None,
        *,
        seed: int = 0,
        shard: tuple[int, int] | None = None,
        encoded: bool = False,
    ):
        self.folder = Path(folder)
        self.manifest = open_checked(self.folder, "shards")
        self.encoded = encoded
        """Yield ``(JPEG bytes as a uint8 tensor, label)``, undecoded (``decode=gpu``)."""
        self.shards = shard_paths(self.folder, self.manifest)
        self.transform = transform
        self.seed = seed
        self.rank, self.world_size = shard or (0, 1)
        self._epoch = 0  # with num_workers=0 (no worker seed to read)

    def for_rank(self, rank: int, world_size: int) -> ShardDataset:
        """This dataset for one rank of a DDP job: its share of the shards every epoch."""
        self.rank, self.world_size = rank, world_size
        return self

    def __len__(self) -> int:
        """Samples this rank reads per epoch (its shards' share, as DistributedSampler gives)."""
        return -(-self.manifest.count // self.world_size)

    def _my_shards(self) -> tuple[list[str], int]:
        """This worker's shards for this epoch and the seed of its buffer shuffle. The shard
        order is one permutation per epoch, the same in every worker (torch seeds worker i
        with base_seed + i, and base_seed is drawn afresh each epoch)."""
        info = get_worker_info()
        if info is None:
            base, worker, workers = self.seed + self._epoch, 0, 1
            self._epoch += 1
        else:
            base, worker, workers = info.seed - info.id, info.id, info.num_workers
        order = list(self.shards)
        random.Random(base).shuffle(order)
        mine = order[self.rank :: self.world_size][worker::workers]
        return mine, base + 1 + worker

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        shards, seed = self._my_shards()
        rng = random.Random(seed)
        for sample in _buffered(self.raw_samples(shards), rng, SHUFFLE_BUFFER):
            yield self._decode(sample)

    def raw_samples(self, shards: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """The shards' samples as stored (key, jpg bytes, cls, url), in file order."""
        # webdataset is optional (the data extra): only for data_format=shards
        import webdataset as wds

        urls = [{"url": path} for path in (self.shards if shards is None else shards)]
        for sample in wds.tarfile_samples(urls, handler=_raise_naming_shard):
            if "jpg" not in sample or "cls" not in sample:
                raise FormatError(
                    f"corrupt shard {sample.get('__url__')}: sample {sample.get('__key__')!r} "
                    f"lacks .jpg or .cls (has {sorted(k for k in sample if not k.startswith('_'))})"
                )
            yield sample

    def indexed_labels(self) -> Iterator[tuple[int, int]]:
        """(source index, label) of every sample, in file order."""
        for s in self.raw_samples():
            yield int(s["__key__"]), int(s["cls"])

    def _decode(self, sample: dict[str, Any]) -> tuple[Any, int]:
        if self.encoded:
            return as_tensor(sample["jpg"]), int(sample["cls"])
        where = f"{sample['__key__']}.jpg in shard {sample['__url__']}"
        rgb = decode_jpeg(sample["jpg"], where)
        label = int(sample["cls"])
        return (self.transform(rgb) if self.transform else rgb), label


def _raise_naming_shard(exc: Exception) -> bool:
    """webdataset's handler: appends the shard's path to the exception's args; raise it as a
    FormatError whose message says which shard."""
    url = next((a for a in reversed(exc.args) if isinstance(a, str) and a.endswith(".tar")), None)
    first = exc.args[0] if exc.args else exc
    where = f"shard {url}" if url else "a shard"
    raise FormatError(f"corrupt or unreadable {where}: {type(exc).__name__}: {first}") from exc


def _buffered(samples: Iterator[Any], rng: random.Random, size: int) -> Iterator[Any]:
    """Shuffle within a buffer of ``size``: fill it, then each new sample swaps out a random one."""
    buffer = list(itertools.islice(samples, size))
    for sample in samples:
        i = rng.randrange(len(buffer))
        buffer[i], sample = sample, buffer[i]
        yield sample
    rng.shuffle(buffer)
    yield from buffer
