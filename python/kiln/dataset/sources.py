"""The datasets a pipeline starts from, with MindSpore's names and keyword arguments."""

import warnings

import numpy as np

from . import _workers
from .engine import Dataset, _native, _names
from .samplers import SubsetView, plan_of


def _shards(num_shards, shard_id):
    if num_shards is None:
        if shard_id is not None:
            raise ValueError("shard_id is given but num_shards is not")
        return 0, 0
    if shard_id is None:
        raise ValueError("num_shards is given but shard_id is not")
    return int(num_shards), int(shard_id)


def _samples(num_samples):
    return 0 if num_samples is None else int(num_samples)


def _random_access(source):
    return hasattr(source, "__getitem__") and hasattr(source, "__len__")


def _sampled(what, sampler, length, shuffle, num_shards, shard_id, num_samples):
    """(indices to view or None, shuffle, num_shards, shard_id, num_samples) once `sampler`, if
    given, has decided them; MindSpore refuses a sampler beside the options it decides."""
    if sampler is None:
        return None, shuffle, num_shards, shard_id, num_samples
    if shuffle is not None or num_shards is not None or shard_id is not None:
        raise ValueError(f"{what}: give a sampler or shuffle/num_shards/shard_id, not both (the "
                         "sampler decides them)")
    plan = plan_of(sampler, length, what)
    if plan.num_samples is not None:
        num_samples = plan.num_samples if num_samples is None else min(num_samples,
                                                                        plan.num_samples)
    return plan.indices, plan.shuffle, plan.num_shards, plan.shard_id, num_samples


def _no_subset(what, indices, sampler):
    if indices is not None:
        raise ValueError(f"{what}: {type(sampler).__name__} picks rows by index, which needs a "
                         "random-access Python source (GeneratorDataset) or NumpySlicesDataset")


class GeneratorDataset(Dataset):
    """Rows from Python: a random-access object (`__getitem__` + `__len__`: shuffled, sharded and
    read by `num_parallel_workers` threads), a callable returning an iterator (a generator
    function; called at each epoch's start) or an iterable. With python_multiprocessing=True and
    num_parallel_workers > 1 the source runs in worker processes (one per reader) that hand rows
    back through shared memory; an iterable then runs in one worker process. Rows are tuples with
    one value per column (arrays, numbers, bytes or str); they are copied, so a source may reuse
    its buffers."""

    def __init__(self, source, column_names=None, column_types=None, schema=None,
                 num_samples=None, num_parallel_workers=1, shuffle=None, sampler=None,
                 num_shards=None, shard_id=None, python_multiprocessing=True, max_rowsize=None):
        del column_types, max_rowsize
        if schema is not None:
            raise ValueError("GeneratorDataset: schema is not supported; give column_names")
        if sampler is not None:
            if not _random_access(source):
                raise ValueError("GeneratorDataset: a sampler needs a random-access source "
                                 "(__getitem__ and __len__); this one can only be iterated")
            indices, shuffle, num_shards, shard_id, num_samples = _sampled(
                "GeneratorDataset", sampler, len(source), shuffle, num_shards, shard_id,
                num_samples)
            if indices is not None:
                source = SubsetView(source, indices)
        columns = _names(column_names)
        if not columns:
            raise ValueError("GeneratorDataset: column_names is required")
        workers = 1 if num_parallel_workers is None else int(num_parallel_workers)
        if workers < 1:
            raise ValueError(f"GeneratorDataset: num_parallel_workers must be >= 1, got {workers}")
        in_processes = bool(python_multiprocessing) and workers > 1
        shards, shard = _shards(num_shards, shard_id)
        shuffle_flag = None if shuffle is None else bool(shuffle)
        group = _workers.WorkerGroup()
        if _random_access(source):
            length = len(source)
            if in_processes:
                def factory():
                    return group.add(_workers.SourceReader(source, "GeneratorDataset"))
            else:
                def factory():
                    return source.__getitem__
        else:
            if callable(source):
                make_iterator = source
            elif hasattr(source, "__iter__"):
                def make_iterator():
                    return iter(source)
            else:
                raise TypeError(f"GeneratorDataset: source {type(source).__name__} is neither "
                                "random-access (__getitem__ and __len__), callable nor iterable")
            if shuffle_flag or shards > 1:
                raise ValueError("GeneratorDataset: shuffle and num_shards need a random-access "
                                 "source (__getitem__ and __len__); this one can only be "
                                 "iterated")
            length = -1
            if workers > 1 and not in_processes:
                warnings.warn("GeneratorDataset: an iterable source is read in one thread; "
                              "num_parallel_workers applies to random-access sources")
            workers = 1
            if in_processes:
                def factory():
                    return group.add(_workers.IteratorReader(_iterator_of(make_iterator),
                                                             "GeneratorDataset"))
            else:
                def factory():
                    return _iterator_of(make_iterator)()
        super().__init__(_native.python_source(
            factory, length, columns, "GeneratorDataset", workers, shuffle_flag,
            _samples(num_samples), shards, shard), [group] if in_processes else [])


def _iterator_of(make_iterator):
    def start():
        it = make_iterator()
        return iter(it)
    return start


class NumpySlicesDataset(Dataset):
    """Arrays (or a dict of them, or one array) sliced along their first dimension. Rows view
    the arrays: no copy is made, so keep them unchanged while the dataset is used."""

    def __init__(self, data, column_names=None, num_samples=None, num_parallel_workers=1,
                 shuffle=None, sampler=None, num_shards=None, shard_id=None):
        if isinstance(data, dict):
            column_names = column_names or list(data.keys())
            arrays = list(data.values())
        elif isinstance(data, tuple):
            arrays = list(data)
        else:
            arrays = [data]
        arrays = [np.ascontiguousarray(a) if not isinstance(a, np.ndarray) else a
                  for a in arrays]
        arrays = [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]
        indices, shuffle, num_shards, shard_id, num_samples = _sampled(
            "NumpySlicesDataset", sampler, len(arrays[0]) if arrays else 0, shuffle, num_shards,
            shard_id, num_samples)
        if indices is not None:
            arrays = [np.ascontiguousarray(a[list(indices)]) for a in arrays]
        columns = _names(column_names) or [f"column_{i}" for i in range(len(arrays))]
        shards, shard = _shards(num_shards, shard_id)
        super().__init__(_native.numpy_slices(
            arrays, columns, _workers_count(num_parallel_workers),
            None if shuffle is None else bool(shuffle), _samples(num_samples), shards, shard))
        self._arrays = arrays  # the rows view them


def _workers_count(num_parallel_workers):
    return 0 if num_parallel_workers is None else int(num_parallel_workers)


class MnistDataset(Dataset):
    """MNIST IDX files in `dataset_dir`: columns "image" (uint8 [28, 28, 1]), "label" (int32)."""

    _fashion = False

    def __init__(self, dataset_dir, usage=None, num_samples=None, num_parallel_workers=None,
                 shuffle=None, sampler=None, num_shards=None, shard_id=None):
        what = type(self).__name__
        indices, shuffle, num_shards, shard_id, num_samples = _sampled(
            what, sampler, None, shuffle, num_shards, shard_id, num_samples)
        _no_subset(what, indices, sampler)
        shards, shard = _shards(num_shards, shard_id)
        super().__init__(_native.mnist(
            dataset_dir or "", self._fashion, usage or "all", _workers_count(num_parallel_workers),
            None if shuffle is None else bool(shuffle), _samples(num_samples), shards, shard))


class FashionMnistDataset(MnistDataset):
    """Fashion-MNIST; an empty `dataset_dir` means Debian's copy (package dataset-fashion-mnist)."""

    _fashion = True


class ImageFolderDataset(Dataset):
    """One subfolder per class: columns "image" (the file's bytes, or uint8 HWC with decode=True)
    and "label" (int32)."""

    def __init__(self, dataset_dir, num_samples=None, num_parallel_workers=None, shuffle=None,
                 sampler=None, extensions=None, class_indexing=None, decode=False,
                 num_shards=None, shard_id=None):
        indices, shuffle, num_shards, shard_id, num_samples = _sampled(
            "ImageFolderDataset", sampler, None, shuffle, num_shards, shard_id, num_samples)
        _no_subset("ImageFolderDataset", indices, sampler)
        shards, shard = _shards(num_shards, shard_id)
        super().__init__(_native.image_folder(
            dataset_dir, bool(decode), list(extensions or []), dict(class_indexing or {}),
            _workers_count(num_parallel_workers), None if shuffle is None else bool(shuffle),
            _samples(num_samples), shards, shard))


class Shuffle:
    """MindSpore's dataset.Shuffle modes for MindDataset."""

    GLOBAL = "global"
    FILES = "files"
    INFILE = "infile"


class MindDataset(Dataset):
    """Kiln record files (written by FileWriter). `dataset_files`: one file (its whole shard set)
    or a list of shard files. shuffle: True/None (global), False, or a Shuffle mode."""

    def __init__(self, dataset_files, columns_list=None, num_parallel_workers=None, shuffle=None,
                 num_shards=None, shard_id=None, sampler=None, padded_sample=None,
                 num_padded=None, num_samples=None):
        if padded_sample is not None or num_padded:
            raise ValueError("MindDataset: padded_sample and num_padded are not supported")
        indices, shuffle, num_shards, shard_id, num_samples = _sampled(
            "MindDataset", sampler, None, shuffle, num_shards, shard_id, num_samples)
        _no_subset("MindDataset", indices, sampler)
        files = [dataset_files] if isinstance(dataset_files, str) else list(dataset_files)
        if shuffle is None or shuffle is True:
            mode = "global"
        elif shuffle is False:
            mode = "none"
        else:
            mode = str(shuffle)
        shards, shard = _shards(num_shards, shard_id)
        super().__init__(_native.record(files, _names(columns_list),
                                        _workers_count(num_parallel_workers), mode,
                                        _samples(num_samples), shards, shard))
