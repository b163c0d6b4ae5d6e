"""Mixed precision (``mindspore.amp``): levels O0..O3 and loss-scale managers for Model."""

LEVELS = ("O0", "O1", "O2", "O3")


class LossScaleManager:
    """Base of the loss-scale managers Model accepts as loss_scale_manager."""

    def _spec(self):
        raise NotImplementedError


class FixedLossScaleManager(LossScaleManager):
    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        if not drop_overflow_update:
            raise ValueError("FixedLossScaleManager: drop_overflow_update=False is not available; "
                             "Kiln always skips an overflowed step")
        self.loss_scale = float(loss_scale)

    def get_loss_scale(self):
        return self.loss_scale

    def get_drop_overflow_update(self):
        return True

    def _spec(self):
        return f"fixed:{self.loss_scale!r}"


class DynamicLossScaleManager(LossScaleManager):
    """Starts at ``init_loss_scale``; an overflowed step is skipped and divides the scale by
    ``scale_factor``; ``scale_window`` steps in a row without overflow multiply it by
    ``scale_factor``."""

    def __init__(self, init_loss_scale=2 ** 24, scale_factor=2, scale_window=2000):
        if not init_loss_scale >= 1:
            raise ValueError("DynamicLossScaleManager: init_loss_scale must be >= 1, got "
                             f"{init_loss_scale}")
        if not scale_factor > 1:
            raise ValueError(f"DynamicLossScaleManager: scale_factor must be > 1, got {scale_factor}")
        if int(scale_window) != scale_window or scale_window < 1:
            raise ValueError("DynamicLossScaleManager: scale_window must be a whole number >= 1, "
                             f"got {scale_window}")
        self.loss_scale = float(init_loss_scale)
        self.scale_factor = float(scale_factor)
        self.scale_window = int(scale_window)

    def get_loss_scale(self):
        return self.loss_scale

    def get_drop_overflow_update(self):
        return True

    def _spec(self):
        # repr: the exact double, which the engine's strtod reads back unchanged.
        return f"dynamic:{self.loss_scale!r},{self.scale_factor!r},{self.scale_window}"
