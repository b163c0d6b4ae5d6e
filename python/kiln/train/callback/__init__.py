"""Training callbacks (``mindspore.train.callback``).

A Python subclass of Callback overrides MindSpore's hooks by either of their names:
``on_train_step_end(run_context)`` or the older ``step_end(run_context)`` (likewise begin/end,
epoch_begin/epoch_end, step_begin).
"""
from ..._kiln.train import (CallbackParams, CheckpointConfig, LossMonitor, ModelCheckpoint,
                            RunContext, TimeMonitor)
from ..._kiln.train import Callback as _NativeCallback


class Callback(_NativeCallback):
    def __init__(self):
        _NativeCallback.__init__(self)

    def on_train_begin(self, run_context):
        self.begin(run_context)

    def on_train_epoch_begin(self, run_context):
        self.epoch_begin(run_context)

    def on_train_step_begin(self, run_context):
        self.step_begin(run_context)

    def on_train_step_end(self, run_context):
        self.step_end(run_context)

    def on_train_epoch_end(self, run_context):
        self.epoch_end(run_context)

    def on_train_end(self, run_context):
        self.end(run_context)

    def begin(self, run_context):
        pass

    def epoch_begin(self, run_context):
        pass

    def step_begin(self, run_context):
        pass

    def step_end(self, run_context):
        pass

    def epoch_end(self, run_context):
        pass

    def end(self, run_context):
        pass
