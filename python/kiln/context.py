"""Process settings with MindSpore's names: ``from kiln import context``.

``context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)``
and ``context.set_auto_parallel_context(parallel_mode=context.ParallelMode.DATA_PARALLEL, ...)``.
"""
from . import _kiln

GRAPH_MODE = _kiln.GRAPH_MODE
PYNATIVE_MODE = _kiln.PYNATIVE_MODE

_CONTEXT_KEYS = {"mode", "device_target", "enable_graph_kernel", "save_graphs_path",
                 "micro_batches", "conv_algorithm"}
# Keys MindSpore scripts commonly pass that have no effect on a CPU: accepted so the script runs.
_CONTEXT_KEYS_WITHOUT_EFFECT = {"device_id", "save_graphs", "max_call_depth", "graph_kernel_flags",
                                "max_device_memory", "enable_reduce_precision"}


def _updated(caller, current, keys, keys_without_effect, kwargs):
    """`current` (a copy of the process's settings) with `kwargs` applied: every setting not
    passed keeps its value, as in MindSpore, including those Python has no key for. Unknown keys
    raise a TypeError naming `caller` and every key it knows."""
    for key, value in kwargs.items():
        if key in keys:
            setattr(current, key, value)
        elif key not in keys_without_effect:
            raise TypeError(f"{caller}: unknown key {key!r}; Kiln knows "
                            f"{sorted(keys | keys_without_effect)}")
    return current


def set_context(**kwargs):
    """Sets the execution mode and its options; keys not passed keep their values, unknown keys
    raise a TypeError naming them. ``conv_algorithm`` is "auto" (Winograd where it is faster),
    "direct" (the closest to float64) or "winograd" (docs/numerics.md)."""
    _kiln.set_context(_updated("set_context", _kiln.get_context(), _CONTEXT_KEYS,
                               _CONTEXT_KEYS_WITHOUT_EFFECT, kwargs))


def get_context(key):
    """The current value of one set_context key."""
    if key not in _CONTEXT_KEYS:
        raise ValueError(f"get_context: unknown key {key!r}; Kiln knows {sorted(_CONTEXT_KEYS)}")
    return getattr(_kiln.get_context(), key)


class ParallelMode:
    """MindSpore's parallel-mode names (strings, as MindSpore's are)."""
    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"


_PARALLEL_KEYS = {"parallel_mode", "gradients_mean", "device_num", "global_rank", "bucket_cap_mb",
                  "first_bucket_cap_mb", "dataset_shard_by_rank", "search_mode",
                  "memory_limit_mb", "op_times"}
_PARALLEL_KEYS_WITHOUT_EFFECT = set()


def set_auto_parallel_context(**kwargs):
    """How training splits over ranks: STAND_ALONE, DATA_PARALLEL, SEMI_AUTO_PARALLEL (strategies
    from ``cell.matmul.shard(...)``) or AUTO_PARALLEL (graph mode; ``search_mode`` is
    "dynamic_programming", "recursive_programming" or "sharding_propagation",
    ``memory_limit_mb`` the memory each rank may use, 0 for no limit, and ``op_times``
    "measured" (each op timed on rank 0 at its strategies' shapes, the default) or "estimated"
    (from its FLOPs and bytes at the machine's peaks))."""
    _kiln.set_auto_parallel_context(
        _updated("set_auto_parallel_context", _kiln.get_auto_parallel_context(), _PARALLEL_KEYS,
                 _PARALLEL_KEYS_WITHOUT_EFFECT, kwargs))


def get_auto_parallel_context(key):
    if key not in _PARALLEL_KEYS:
        raise ValueError(f"get_auto_parallel_context: unknown key {key!r}")
    return getattr(_kiln.get_auto_parallel_context(), key)


def reset_auto_parallel_context():
    _kiln.reset_auto_parallel_context()
