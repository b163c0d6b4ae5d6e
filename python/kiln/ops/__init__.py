"""The op table's ops as functions (eager, or traced inside a graph-mode construct)."""
from .._kiln.ops import *  # noqa: F401,F403
from .._kiln.ops import (add, argmax, cast, concat, matmul, max, mean, mul, reshape, softmax, sub,
                         sum, transpose)

# MindSpore's functional spellings.
reduce_mean = mean
reduce_sum = sum
reduce_max = max
