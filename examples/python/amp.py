"""Mixed precision (guide §3.2): amp_level O0, O2 (bf16 except the black list, BatchNorm in fp32)
and O3, with the loss scale a fp16 user would add."""
import time

from kiln import context
from kiln.amp import DynamicLossScaleManager
from kiln.train.callback import LossMonitor

from lenet_fashion import fashion_mnist, lenet_model

context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
for level in ("O0", "O2", "O3"):
    model = lenet_model(amp_level=level, keep_batchnorm_fp32=True)
    start = time.perf_counter()
    model.train(1, fashion_mnist(), callbacks=[LossMonitor(300)])
    print(f"{level}: {time.perf_counter() - start:.1f} s, "
          f"accuracy {model.eval(fashion_mnist('test'))['accuracy']:.3f}")
fp16 = lenet_model(amp_level="O2", amp_dtype="fp16", loss_scale_manager=DynamicLossScaleManager())
fp16.train(1, fashion_mnist(), callbacks=[LossMonitor(300)])
print(f"O2 fp16 with dynamic loss scaling: {fp16.skipped_steps} overflowed steps skipped")
