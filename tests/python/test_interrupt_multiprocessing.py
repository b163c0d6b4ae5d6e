"""Ctrl-C while Model.train reads a GeneratorDataset whose Python source and map function run in
worker processes (python_multiprocessing=True): training ends with KeyboardInterrupt, and the
workers and their shared memory are gone, whether the signal reaches the main process alone or,
as from a terminal, the whole process group."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import multiprocessing, os, sys
    sys.path.insert(0, {tests!r})
    import numpy as np
    import kiln
    import kiln.dataset as ds
    from kiln import nn, _kiln
    from kiln.train.callback import Callback
    from kiln_test_data import fashion_like_batches
    _kiln.set_num_threads(1)
    images, labels = fashion_like_batches(8, 8)

    class Source:
        def __len__(self):
            return len(labels)

        def __getitem__(self, index):
            return images[index], labels[index]

    def brighten(image):
        return image + np.float32(0.5)

    class ReportWorkers(Callback):
        def on_train_step_end(self, run_context):
            if run_context.original_args().cur_step_num == 1:
                self.workers = [p.pid for p in multiprocessing.active_children()]
                print("workers", *self.workers, flush=True)

    dataset = ds.GeneratorDataset(Source(), ["image", "label"], num_parallel_workers=2,
                                  shuffle=True, python_multiprocessing=True)
    dataset = dataset.map(operations=brighten, input_columns="image", num_parallel_workers=2,
                          python_multiprocessing=True)
    dataset = dataset.batch(8, drop_remainder=True)
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(784, 10)])
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    report = ReportWorkers()
    try:
        model.train(100000, dataset, callbacks=[report])
    except KeyboardInterrupt:
        multiprocessing.active_children()  # reaps workers that have ended
        def running(pid):
            try:
                with open(f"/proc/{{pid}}/stat") as stat:
                    return stat.read().split(") ")[1][0] != "Z"
            except FileNotFoundError:
                return False
        print("interrupted at step", model.global_step, flush=True)
        print("still running", *[pid for pid in report.workers if running(pid)], flush=True)
        sys.exit(3)
""")


def shared_memory_segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith("psm_")}


@pytest.mark.parametrize("target", ["main process", "process group"])
def test_ctrl_c_ends_training_and_its_worker_processes(target):
    segments_before = shared_memory_segments()
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=tests)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline().split()
        assert line[:1] == ["workers"], (line, proc.stderr.read() if proc.poll() else "")
        workers = [int(pid) for pid in line[1:]]
        # The source's 2 readers and the map's 2 workers.
        assert len(workers) == 4, workers
        time.sleep(0.5)
        start = time.monotonic()
        if target == "main process":
            proc.send_signal(signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 3, (out, err)
    assert time.monotonic() - start < 5
    assert int(out.split("interrupted at step")[1].split()[0]) > 1, out
    assert "still running\n" in out, out  # no worker process left
    assert "Traceback" not in err, err  # workers end quietly
    assert shared_memory_segments() <= segments_before
