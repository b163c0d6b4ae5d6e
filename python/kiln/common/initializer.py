"""Initializers with MindSpore's names (``mindspore.common.initializer``)."""
from .._kiln.nn import (Constant, HeNormal, HeUniform, Initializer, Normal, One,
                        TruncatedNormal, Uniform, XavierUniform, Zero)
from .._kiln import DType

_BY_NAME = {
    "normal": Normal, "uniform": Uniform, "he_uniform": HeUniform, "heuniform": HeUniform,
    "he_normal": HeNormal, "henormal": HeNormal, "xavier_uniform": XavierUniform,
    "xavieruniform": XavierUniform, "truncatednormal": TruncatedNormal,
    "truncated_normal": TruncatedNormal, "zeros": Zero, "zero": Zero, "ones": One, "one": One,
}


def initializer(init, shape, dtype=DType.float32):
    """A new tensor of ``shape`` filled by ``init`` (a name, an Initializer or a number)."""
    if isinstance(init, str):
        try:
            init = _BY_NAME[init.lower()]()
        except KeyError:
            raise ValueError(f"initializer: unknown name {init!r}; known: {sorted(_BY_NAME)}") from None
    elif isinstance(init, (int, float)):
        init = Constant(float(init))
    tensor = init(list(shape))
    return tensor if dtype == DType.float32 else tensor.astype(dtype)
