"""Samplers (MindSpore's dataset samplers): which rows of a source an epoch reads, in what order.

    sampler = ds.DistributedSampler(num_shards=2, shard_id=0, shuffle=True)
    dataset = ds.GeneratorDataset(source, ["image", "label"], sampler=sampler)

Each sampler becomes the engine's own reading options (shuffle, shards, rows per epoch), so the
rows are still read by the pipeline's threads; a subset of indices is read through a view of a
random-access source. Any other iterable of indices is read once, and each epoch reads those
rows in that order.
"""


class _Plan:
    """What a sampler asks of a source: rows to view (None: all), shuffling, sharding, count."""

    def __init__(self, indices=None, shuffle=False, num_samples=None, num_shards=None,
                 shard_id=None):
        self.indices = indices
        self.shuffle = shuffle
        self.num_samples = num_samples
        self.num_shards = num_shards
        self.shard_id = shard_id


def _count(num_samples, what):
    if num_samples is None:
        return None
    num_samples = int(num_samples)
    if num_samples < 0:
        raise ValueError(f"{what}: num_samples must be >= 0, got {num_samples}")
    return num_samples or None


class Sampler:
    """Base of the samplers; a subclass says what it reads in _plan()."""

    def _plan(self, length):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, start_index=None, num_samples=None):
        self.start_index = int(start_index or 0)
        if self.start_index < 0:
            raise ValueError(f"SequentialSampler: start_index must be >= 0, got {start_index}")
        self.num_samples = _count(num_samples, "SequentialSampler")

    def _plan(self, length):
        indices = None
        if self.start_index:
            if length is not None and self.start_index >= length:
                raise ValueError(f"SequentialSampler: start_index {self.start_index} is past the "
                                 f"source's {length} rows")
            indices = range(self.start_index, length)
        return _Plan(indices, False, self.num_samples)


class RandomSampler(Sampler):
    def __init__(self, replacement=False, num_samples=None):
        if replacement:
            raise ValueError("RandomSampler: replacement=True is not available; each epoch reads "
                             "a permutation of the rows")
        self.num_samples = _count(num_samples, "RandomSampler")

    def _plan(self, length):
        return _Plan(None, True, self.num_samples)


class DistributedSampler(Sampler):
    """Shard `shard_id` of `num_shards` (each rank reads its own)."""

    def __init__(self, num_shards, shard_id, shuffle=True, num_samples=None, offset=-1):
        if offset != -1:
            raise ValueError("DistributedSampler: offset is not available")
        self.num_shards, self.shard_id = int(num_shards), int(shard_id)
        if self.num_shards < 1 or not 0 <= self.shard_id < self.num_shards:
            raise ValueError(f"DistributedSampler: shard_id {shard_id} is not in "
                             f"[0, num_shards={num_shards})")
        self.shuffle = bool(shuffle)
        self.num_samples = _count(num_samples, "DistributedSampler")

    def _plan(self, length):
        return _Plan(None, self.shuffle, self.num_samples, self.num_shards, self.shard_id)


class SubsetSampler(Sampler):
    """The rows at `indices`, in that order."""

    _shuffle = False

    def __init__(self, indices, num_samples=None):
        self.indices = [int(i) for i in indices]
        if not self.indices:
            raise ValueError(f"{type(self).__name__}: indices is empty")
        self.num_samples = _count(num_samples, type(self).__name__)

    def _plan(self, length):
        if length is not None:
            bad = [i for i in self.indices if not 0 <= i < length]
            if bad:
                raise ValueError(f"{type(self).__name__}: indices {bad[:5]} are outside the "
                                 f"source's {length} rows")
        return _Plan(self.indices, self._shuffle, self.num_samples)


class SubsetRandomSampler(SubsetSampler):
    """The rows at `indices`, in a new random order each epoch."""

    _shuffle = True


def plan_of(sampler, length, what):
    """A sampler (or an iterable of indices) as a _Plan for a source of `length` rows."""
    if isinstance(sampler, Sampler):
        return sampler._plan(length)
    if hasattr(sampler, "__iter__"):
        return SubsetSampler(list(sampler))._plan(length)
    raise TypeError(f"{what}: sampler {sampler!r} is neither a sampler nor an iterable of indices")


class SubsetView:
    """A random-access source seen through a list of its indices."""

    def __init__(self, source, indices):
        self.source, self.indices = source, list(indices)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.source[self.indices[i]]
