"""Vision transforms (MindSpore's mindspore.dataset.vision) on HWC images, uint8 or float32.
They run on the pipeline's C++ threads without the GIL, and can be called on a numpy array."""

from enum import Enum

from ._native_transform import NativeTransform as _NativeTransform
from .engine import _native


class Inter(Enum):
    BILINEAR = "bilinear"
    LINEAR = "bilinear"
    NEAREST = "nearest"


def _inter(value):
    return value.value if isinstance(value, Inter) else str(value).lower()


def _size(size):
    return [int(size)] if isinstance(size, int) else [int(s) for s in size]




class Decode(_NativeTransform):
    def __init__(self, to_pil=False, rgb=True):
        if to_pil:
            raise ValueError("Decode: to_pil=True is not supported; images stay numpy arrays")
        self._native = _native.Decode(bool(rgb))


class Resize(_NativeTransform):
    def __init__(self, size, interpolation=Inter.BILINEAR):
        self._native = _native.Resize(_size(size), _inter(interpolation))


class CenterCrop(_NativeTransform):
    def __init__(self, size):
        self._native = _native.CenterCrop(_size(size))


class RandomCrop(_NativeTransform):
    def __init__(self, size, padding=None, pad_if_needed=False, fill_value=0, padding_mode=None):
        if padding_mode not in (None, "constant") and str(padding_mode) != "Border.CONSTANT":
            raise ValueError("RandomCrop: only constant padding is supported")
        pads = [] if padding is None else _size(padding)
        fill = fill_value[0] if isinstance(fill_value, (tuple, list)) else fill_value
        self._native = _native.RandomCrop(_size(size), pads, bool(pad_if_needed), float(fill))


class RandomResizedCrop(_NativeTransform):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=Inter.BILINEAR, max_attempts=10):
        self._native = _native.RandomResizedCrop(_size(size), tuple(scale), tuple(ratio),
                                                 _inter(interpolation), int(max_attempts))


class RandomHorizontalFlip(_NativeTransform):
    def __init__(self, prob=0.5):
        self._native = _native.RandomHorizontalFlip(float(prob))


class RandomVerticalFlip(_NativeTransform):
    def __init__(self, prob=0.5):
        self._native = _native.RandomVerticalFlip(float(prob))


class RandomRotation(_NativeTransform):
    def __init__(self, degrees, resample=Inter.NEAREST, expand=False, center=None, fill_value=0):
        if center is not None:
            raise ValueError("RandomRotation: center is not supported (rotates about the middle)")
        degrees = [float(degrees)] if isinstance(degrees, (int, float)) else \
            [float(d) for d in degrees]
        fill = fill_value[0] if isinstance(fill_value, (tuple, list)) else fill_value
        self._native = _native.RandomRotation(degrees, _inter(resample), bool(expand), float(fill))


class Rescale(_NativeTransform):
    """out = in * rescale + shift, as float32."""

    def __init__(self, rescale, shift):
        self._native = _native.Rescale(float(rescale), float(shift))


class Normalize(_NativeTransform):
    """out = (in - mean[c]) / std[c], as float32."""

    def __init__(self, mean, std, is_hwc=True):
        self._native = _native.Normalize([float(m) for m in mean], [float(s) for s in std],
                                         bool(is_hwc))


class HWC2CHW(_NativeTransform):
    def __init__(self):
        self._native = _native.HWC2CHW()


from .transforms import TypeCast  # noqa: E402  (MindSpore also lists it under vision)
