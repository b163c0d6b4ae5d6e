"""nn.Cell for Python subclasses: attribute assignment registers child cells and Parameters.

The engine's Cell (kiln._kiln.nn.Cell) is extended in place, so built-in layers (nn.Dense, ...)
and Python-defined cells are one class hierarchy: ``isinstance(nn.Dense(2, 3), nn.Cell)``.
"""
from .._kiln.nn import Cell
from ..common.tensor import Parameter

_native_init = Cell.__init__


def _cell_init(self, auto_prefix=True, flags=None):
    _native_init(self, type(self).__name__)
    # auto_prefix=False (MindSpore's wrappers): child cells' parameters keep their own names.
    object.__setattr__(self, "_auto_prefix", bool(auto_prefix))


def _cell_setattr(self, name, value):
    if not name.startswith("_"):
        if isinstance(value, Cell):
            self._register_cell(name if getattr(self, "_auto_prefix", True) else "", value)
        elif isinstance(value, Parameter):
            if value.name is None:
                value.name = name
            self._register_parameter(name, value)
    object.__setattr__(self, name, value)


def _cell_call(self, *args, **kwargs):
    return self.construct(*args, **kwargs)


def _parameters_and_names(self):
    """(path, parameter) pairs of this cell and its children ("conv1.weight", ...)."""
    return iter(self._parameters_and_names())


def _get_parameters(self):
    return iter(tensor for _, tensor in self._parameters_and_names())


def _parameters_dict(self):
    return dict(self._parameters_and_names())


def _set_grad(self, requires_grad=True):
    """MindSpore's switch for building the backward graph: Kiln differentiates what it trains."""
    return self


Cell.__init__ = _cell_init
Cell.__setattr__ = _cell_setattr
Cell.__call__ = _cell_call
Cell.parameters_and_names = _parameters_and_names
Cell.get_parameters = _get_parameters
Cell.parameters_dict = _parameters_dict
Cell.set_grad = _set_grad
