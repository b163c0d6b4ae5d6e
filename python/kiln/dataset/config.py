"""Pipeline settings (MindSpore's mindspore.dataset.config)."""

from .engine import _native

set_seed = _native.config.set_seed
get_seed = _native.config.get_seed
set_prefetch_size = _native.config.set_prefetch_size
get_prefetch_size = _native.config.get_prefetch_size
set_num_parallel_workers = _native.config.set_num_parallel_workers
get_num_parallel_workers = _native.config.get_num_parallel_workers
