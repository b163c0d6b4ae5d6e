"""Data sink mode (guide §5): with dataset_sink_mode=True the steps of a sink run inside the
engine with no Python between them, and the callbacks run once per sink: once per epoch here,
where TimeMonitor and LossMonitor report (LossMonitor shows each step's loss, from
cb_params.step_losses). sink_size=N makes sinks of N steps instead."""
from kiln import context
from kiln.train.callback import Callback, LossMonitor, TimeMonitor

from lenet_fashion import fashion_mnist, lenet_model


class SinkLosses(Callback):
    """What a callback sees at a sink's end: its steps and the loss of each."""

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        losses = cb_params.step_losses
        print(f"sink ending at step {cb_params.cur_step_num}: {cb_params.steps_this_sink} steps, "
              f"mean loss {sum(losses) / len(losses):.4f}")


context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
train_ds = fashion_mnist()
model = lenet_model()
time_cb = TimeMonitor(data_size=train_ds.get_dataset_size())
loss_cb = LossMonitor(100)
model.train(epoch=3, train_dataset=train_ds, callbacks=[time_cb, loss_cb], dataset_sink_mode=True)
model.train(epoch=4, train_dataset=train_ds, callbacks=[SinkLosses()], dataset_sink_mode=True,
            sink_size=300, initial_epoch=3)
