"""General transforms (MindSpore's mindspore.dataset.transforms)."""

from .engine import _native
from ._native_transform import NativeTransform as _NativeTransform


def _dtype_name(data_type):
    name = getattr(data_type, "name", None) or getattr(data_type, "__name__", None) \
        or str(data_type)
    name = str(name).lower().replace("kiln.", "").replace("mstype.", "")
    aliases = {"float": "float32", "int": "int32", "bool_": "bool", "float64": "float32"}
    return aliases.get(name, name)


class TypeCast(_NativeTransform):
    """Casts to `data_type`: a kiln dtype, a numpy dtype or a name ("float32")."""

    def __init__(self, data_type):
        self._native = _native.TypeCast(_dtype_name(data_type))


class OneHot(_NativeTransform):
    def __init__(self, num_classes):
        self._native = _native.OneHot(int(num_classes))


class Compose(_NativeTransform):
    """Applies transforms in order, as one. Native transforms only: give Python callables to map
    directly."""

    def __init__(self, transforms):
        natives = []
        for t in transforms:
            if getattr(t, "_native", None) is None:
                raise TypeError(f"Compose: {t!r} is not a kiln.dataset transform; pass Python "
                                "functions to map() as separate operations")
            natives.append(t._native)
        self._native = _native.Compose(natives)
