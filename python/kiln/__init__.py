"""Kiln: a deep-learning training engine for CPUs, with MindSpore's Python names.

A MindSpore script runs with its imports changed from ``mindspore`` to ``kiln`` and
``device_target="CPU"``::

    import kiln as ms
    from kiln import nn, Model, context
    context.set_context(mode=context.GRAPH_MODE, device_target="CPU")
"""
from . import _kiln
from .common import dtype
from .common.dtype import (bfloat16, bool_, float16, float32, float_, half, int32, int64, int_,
                           uint8)
from .common.tensor import Parameter, Tensor
from .common.initializer import initializer
from . import context
from .context import (GRAPH_MODE, PYNATIVE_MODE, ParallelMode, get_auto_parallel_context,
                      get_context, reset_auto_parallel_context, set_auto_parallel_context,
                      set_context)
from . import amp, communication, nn, ops, train
from .amp import DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager
from .train import Model, load_checkpoint, load_param_into_net, save_checkpoint
from .profiler import Profiler

__version__ = "0.1.0"


def set_seed(seed):
    """Seeds the engine's generator (initializers, dropout, shuffling)."""
    _kiln.set_seed(int(seed))


def __getattr__(name):
    # kiln.dataset is a package of its own, imported on first use.
    if name == "dataset":
        import importlib
        return importlib.import_module(".dataset", __name__)
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
