"""Run modes (guide §1): the same Python network in PYNATIVE_MODE (op by op, for debugging) and
in GRAPH_MODE with graph-kernel fusion (traced once, compiled, no Python per step)."""
import time

from kiln import context
from kiln.train.callback import LossMonitor

from lenet_fashion import fashion_mnist, lenet_model

for name, mode in (("PYNATIVE_MODE", context.PYNATIVE_MODE), ("GRAPH_MODE", context.GRAPH_MODE)):
    context.set_context(mode=mode, device_target="CPU", enable_graph_kernel=True)
    model = lenet_model()
    start = time.perf_counter()
    model.train(1, fashion_mnist(), callbacks=[LossMonitor(300)])
    print(f"{name}: one epoch in {time.perf_counter() - start:.1f} s, "
          f"test accuracy {model.eval(fashion_mnist('test'))['accuracy']:.3f}")
