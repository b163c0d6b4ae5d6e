"""Data sink mode from Python: Model.train on the examples' Python LeNet, graph mode with fusion,
the guide's callbacks (TimeMonitor, LossMonitor), with dataset_sink_mode off and on, and the
loop that MindSpore's non-sink mode runs, written out in Python (python-loop: each step a call of
a TrainOneStepCell from Python over create_tuple_iterator(), its loss printed as LossMonitor
prints it), alternating. Prints one JSON line per run (--mode per-step|sink|python-loop) or, with
--compare, the medians and ratios.

  PYTHONPATH=build/python /usr/bin/python3 bench/python/sink_bench.py --compare --repeats 5

--data python: a GeneratorDataset over a random-access Python source (the guide's
`ds.GeneratorDataset(source=data_generator, ...)`: rows come from Python, so the pipeline's
threads take the GIL); python-processes: the same source in 2 worker processes
(python_multiprocessing=True); native: FashionMnistDataset with native maps (no Python at all
after the call). Fashion-MNIST from /usr/share/datasets/fashion-mnist (dataset-fashion-mnist).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "python"))


class FashionRows:
    """Row i of Fashion-MNIST as (float32 [1, 28, 28] in [0, 1], int32 label)."""

    def __init__(self, images, labels):
        self.images = (images.astype(np.float32) / 255.0)[:, None, :, :]
        self.labels = labels.astype(np.int32)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def dataset_for(kind, data_dir, batch_size, steps, workers):
    import kiln
    import kiln.dataset as ds
    import kiln.dataset.transforms as transforms
    import kiln.dataset.vision as vision
    if kind in ("python", "python-processes"):
        from torch_train import load_idx  # the same IDX reader as the PyTorch side
        source = FashionRows(load_idx(f"{data_dir}/train-images-idx3-ubyte.gz"),
                             load_idx(f"{data_dir}/train-labels-idx1-ubyte.gz"))
        dataset = ds.GeneratorDataset(source=source, column_names=["image", "label"],
                                      num_parallel_workers=workers, shuffle=True,
                                      python_multiprocessing=kind == "python-processes")
    else:
        dataset = ds.FashionMnistDataset(data_dir, usage="train", shuffle=True)
        dataset = dataset.map(operations=[vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                              input_columns="image", num_parallel_workers=workers)
        dataset = dataset.map(operations=transforms.TypeCast(kiln.int32), input_columns="label")
    return dataset.batch(batch_size, drop_remainder=True).take(steps)


def run_once(a):
    import kiln
    from kiln import _kiln, nn
    from kiln.train.callback import LossMonitor, TimeMonitor
    from lenet import LeNet5
    _kiln.set_num_threads(a.threads)
    kiln.set_context(mode=kiln.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
    kiln.set_seed(1)
    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = kiln.Model(net, loss_fn=loss_fn, optimizer=optimizer)
    warmup = dataset_for(a.data, a.data_dir, a.batch_size, 20, a.workers)
    train_ds = dataset_for(a.data, a.data_dir, a.batch_size, a.steps, a.workers)
    if a.mode == "python-loop":
        train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
        train_net.set_train()

        def train():
            for epoch in range(1, a.epochs + 1):
                start = time.perf_counter()
                for step, (image, label) in enumerate(train_ds.create_tuple_iterator(), 1):
                    loss = train_net(image, label)
                    print(f"epoch: {epoch} step: {step}, loss is {loss.asnumpy()}")
                print(f"Train epoch time: {(time.perf_counter() - start) * 1e3:.3f} ms")

        for image, label in warmup.create_tuple_iterator():  # compiles, picks its threads
            train_net(image, label)
    else:
        model.train(1, warmup)  # compiles the step (and picks its threads) outside the timing
        callbacks = [TimeMonitor(data_size=train_ds.get_dataset_size()), LossMonitor()]

        def train():
            model.train(a.epochs, train_ds, callbacks=callbacks,
                        dataset_sink_mode=a.mode == "sink", sink_size=a.sink_size)
    # The monitors' lines go to fd 1: park it on /dev/null while training (same cost both ways).
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    try:
        train()
    finally:
        elapsed = time.perf_counter() - start
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        os.dup2(saved, 1)
        os.close(null)
        os.close(saved)
    steps = a.steps * a.epochs
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    print(json.dumps({"mode": a.mode, "data": a.data, "batch_size": a.batch_size,
                      "steps": steps, "sink_size": a.sink_size, "threads": a.threads,
                      "images_per_sec": steps * a.batch_size / elapsed,
                      "cpu_ms_per_step": cpu / steps * 1e3}), flush=True)


def compare(a):
    """Alternating child processes, each mode in turn, --repeats times; medians and ratios."""
    results = {"per-step": [], "sink": [], "python-loop": []}
    args = [sys.executable, os.path.abspath(__file__), "--data", a.data, "--steps", str(a.steps),
            "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--threads",
            str(a.threads), "--workers", str(a.workers), "--sink-size", str(a.sink_size),
            "--data-dir", a.data_dir]
    for _ in range(a.repeats):
        for mode in results:
            out = subprocess.run(args + ["--mode", mode], check=True, capture_output=True,
                                 text=True).stdout
            results[mode].append(json.loads(out.strip().splitlines()[-1]))
    def figures(mode):
        rates = [r["images_per_sec"] for r in results[mode]]
        cpu = statistics.median(r["cpu_ms_per_step"] for r in results[mode])
        return statistics.median(rates), max(rates), cpu

    per_step, per_step_best, cpu_per_step = figures("per-step")
    sink, sink_best, cpu_sink = figures("sink")
    loop, loop_best, cpu_loop = figures("python-loop")
    print(f"Python LeNet b{a.batch_size}, graph mode, {a.data} data, {a.threads} kernel "
          f"thread(s), {a.steps * a.epochs} steps; images/s median (best) of {a.repeats}:")
    print(f"  per step   {per_step:8.0f} ({per_step_best:6.0f}) images/s   {cpu_per_step:.3f} ms "
          "CPU per step")
    print(f"  sink {a.sink_size:>5} {sink:8.0f} ({sink_best:6.0f}) images/s   {cpu_sink:.3f} ms "
          "CPU per step")
    print(f"  Python loop {loop:8.0f} ({loop_best:6.0f}) images/s   {cpu_loop:.3f} ms CPU per step")
    print(f"  sink / per step: {sink / per_step:.2f}x median, {sink_best / per_step_best:.2f}x "
          f"best, {cpu_per_step / cpu_sink:.2f}x less CPU per step")
    print(f"  sink / Python loop: {sink / loop:.2f}x median, {sink_best / loop_best:.2f}x best, "
          f"{cpu_loop / cpu_sink:.2f}x less CPU per step (target >= 1.1x); load average "
          f"{os.getloadavg()[0]:.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="sink", choices=["per-step", "sink", "python-loop"])
    p.add_argument("--compare", action="store_true")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data", default="python", choices=["python", "python-processes", "native"])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=400, help="steps per epoch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--sink-size", type=int, default=-1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2, help="pipeline threads")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if a.compare:
        compare(a)
    else:
        run_once(a)


if __name__ == "__main__":
    main()
