"""LeNet-5 training throughput from Python: the network defined in Python from kiln.nn layers
(--net python) or the engine's built-in C++ LeNet (--net cpp), eager or graph mode, on
Fashion-MNIST held in memory, as bench/torch_train.py trains PyTorch's. Prints one JSON line.

  PYTHONPATH=build/python /usr/bin/python3 bench/python/lenet_bench.py --net python --mode graph
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_train import load_idx  # noqa: E402  (the same loader as the PyTorch side)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "python"))
from lenet import LeNet5  # noqa: E402  (the examples' network)

import kiln  # noqa: E402
from kiln import _kiln, nn  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--net", default="python", choices=["python", "cpp"])
    p.add_argument("--mode", default="graph", choices=["eager", "graph"])
    p.add_argument("--graph-kernel", default="on", choices=["on", "off"])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    _kiln.set_num_threads(a.threads)
    kiln.set_context(mode=kiln.GRAPH_MODE if a.mode == "graph" else kiln.PYNATIVE_MODE,
                     device_target="CPU", enable_graph_kernel=a.graph_kernel == "on")
    kiln.set_seed(1)

    images = load_idx(f"{a.data_dir}/train-images-idx3-ubyte.gz")
    labels = load_idx(f"{a.data_dir}/train-labels-idx1-ubyte.gz")
    x_all = (images.astype(np.float32) / 255.0)[:, None, :, :]
    y_all = labels.astype(np.int32)

    net = LeNet5() if a.net == "python" else _kiln.models.create("lenet")
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = kiln.Model(net, loss_fn=loss, optimizer=opt)
    n, b, warmup = len(y_all), a.batch_size, 10
    start = None
    for step in range(a.steps + warmup):
        i = (step * b) % (n - b)
        # Slices of contiguous arrays: the tensors view them, no copy.
        last = model.train_step(kiln.Tensor(x_all[i:i + b]), kiln.Tensor(y_all[i:i + b]))
        if step == warmup - 1:
            start = time.perf_counter()
    elapsed = time.perf_counter() - start
    print(json.dumps({"framework": "kiln-python", "net": a.net, "mode": a.mode,
                      "batch_size": b, "steps": a.steps, "threads": a.threads,
                      "images_per_sec": a.steps * b / elapsed, "final_loss": last}))


if __name__ == "__main__":
    main()
