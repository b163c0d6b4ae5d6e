"""kiln.dataset: MindSpore's mindspore.dataset on Kiln's C++ data pipeline.

    import kiln.dataset as ds
    import kiln.dataset.vision as vision
    dataset = ds.GeneratorDataset(source=data_generator, column_names=["image", "label"],
                                  num_parallel_workers=4, shuffle=True)
    dataset = dataset.map(operations=[vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                          input_columns="image", num_parallel_workers=4)
    dataset = dataset.batch(32, drop_remainder=True)
"""

from . import config, transforms, vision
from .engine import BatchInfo, Dataset, DictIterator, TupleIterator
from .mindrecord import FileWriter
from .sources import (FashionMnistDataset, GeneratorDataset, ImageFolderDataset, MindDataset,
                      MnistDataset, NumpySlicesDataset, Shuffle)
from .samplers import (DistributedSampler, RandomSampler, Sampler, SequentialSampler,
                       SubsetRandomSampler, SubsetSampler)

__all__ = [
    "Dataset", "DictIterator", "TupleIterator", "GeneratorDataset", "NumpySlicesDataset",
    "MnistDataset", "FashionMnistDataset", "ImageFolderDataset", "MindDataset", "Shuffle",
    "FileWriter", "config", "transforms", "vision", "BatchInfo", "Sampler", "SequentialSampler",
    "RandomSampler", "DistributedSampler", "SubsetSampler", "SubsetRandomSampler",
]
