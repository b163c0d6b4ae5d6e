"""Tensors, parameters, dtypes and initializers (mindspore.common)."""
from .tensor import Tensor, Parameter
from . import dtype
from .initializer import initializer
