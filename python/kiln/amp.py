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

    def _spec(self):
        return f"fixed:{self.loss_scale:g}"


class DynamicLossScaleManager(LossScaleManager):
    def __init__(self, init_loss_scale=2 ** 24, scale_factor=2, scale_window=2000):
        if (init_loss_scale, scale_factor, scale_window) != (2 ** 24, 2, 2000):
            raise ValueError("DynamicLossScaleManager: Kiln's dynamic scaling uses MindSpore's "
                             "defaults (init_loss_scale=2**24, scale_factor=2, scale_window=2000); "
                             f"got ({init_loss_scale}, {scale_factor}, {scale_window})")
        self.loss_scale = float(init_loss_scale)

    def get_loss_scale(self):
        return self.loss_scale

    def _spec(self):
        return "dynamic"
