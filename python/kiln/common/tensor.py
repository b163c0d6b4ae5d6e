"""kiln.Tensor (the engine's tensor) and kiln.Parameter (a named, trainable tensor)."""
from .._kiln import Tensor


class Parameter(Tensor):
    """A tensor a Cell trains: assigning it to a Cell attribute registers it under that name.

    ``Parameter(default_input, name=None, requires_grad=True)`` as MindSpore spells it; the
    parameter shares default_input's memory when it is a Tensor (or a numpy array that can be
    viewed without a copy).
    """

    def __init__(self, default_input, name=None, requires_grad=True):
        Tensor.__init__(self, default_input)
        self.name = name
        self.requires_grad = requires_grad

    def __repr__(self):
        return f"Parameter(name={self.name!r}, shape={self.shape}, dtype={self.dtype})"
