"""Data sink mode (guide §5): with dataset_sink_mode=True the callbacks' step hooks fire once
per sink (here once per epoch), so LossMonitor and TimeMonitor log per epoch."""
from kiln import context
from kiln.train.callback import LossMonitor, TimeMonitor

from lenet_fashion import fashion_mnist, lenet_model

context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
train_ds = fashion_mnist()
model = lenet_model()
time_cb = TimeMonitor(data_size=train_ds.get_dataset_size())
loss_cb = LossMonitor()
model.train(epoch=3, train_dataset=train_ds, callbacks=[time_cb, loss_cb], dataset_sink_mode=True)
