"""Monitoring (guide §6.1): TimeMonitor and LossMonitor, a callback written in Python that keeps
each epoch's loss and stops early, and checkpoints every 500 steps."""
import tempfile

from kiln import context
from kiln.train.callback import (Callback, CheckpointConfig, LossMonitor, ModelCheckpoint,
                                 TimeMonitor)

from lenet_fashion import fashion_mnist, lenet_model


class EpochLosses(Callback):
    def __init__(self, stop_below):
        super().__init__()
        self.losses = []
        self.stop_below = stop_below

    def on_train_epoch_end(self, run_context):
        cb_params = run_context.original_args()
        self.losses.append(cb_params.net_outputs)
        print(f"epoch {cb_params.cur_epoch_num}: loss {cb_params.net_outputs:.4f}")
        if cb_params.net_outputs < self.stop_below:
            run_context.request_stop()


context.set_context(mode=context.GRAPH_MODE, device_target="CPU")
train_ds = fashion_mnist()
model = lenet_model()
with tempfile.TemporaryDirectory() as ckpt_dir:
    checkpoints = ModelCheckpoint(prefix="lenet", directory=ckpt_dir,
                                  config=CheckpointConfig(save_checkpoint_steps=500,
                                                          keep_checkpoint_max=2))
    epochs = EpochLosses(stop_below=0.2)
    model.train(5, train_ds, callbacks=[TimeMonitor(data_size=train_ds.get_dataset_size()),
                                        LossMonitor(200), epochs, checkpoints])
    print(f"losses per epoch: {epochs.losses}; last checkpoint {checkpoints.latest_checkpoint}")
