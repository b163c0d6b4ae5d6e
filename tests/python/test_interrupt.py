"""Ctrl-C while Model.train runs in the engine (GIL released) stops it with KeyboardInterrupt:
after the current step, or in sink mode at the end of the current sink."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import kiln
    from kiln import nn, _kiln
    from kiln_test_data import ArrayDataset, fashion_like_batches
    _kiln.set_num_threads(1)
    images, labels = fashion_like_batches(49, 8)  # 49 steps per epoch
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(784, 10)])
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    print("training", flush=True)
    try:
        model.train(100000, ArrayDataset(images, labels, 8), {train_args})
    except KeyboardInterrupt:
        print("interrupted at step", model.global_step, flush=True)
        sys.exit(3)
""")


def interrupted_step(train_args):
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=tests, train_args=train_args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "training"
    time.sleep(0.5)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 3, (out, err)
    assert time.monotonic() - start < 5
    return int(out.split("interrupted at step")[1])


def test_ctrl_c_ends_training_with_keyboard_interrupt():
    assert interrupted_step("dataset_sink_mode=False") > 0


@pytest.mark.parametrize("sink_size", [7, -1])
def test_ctrl_c_in_sink_mode_ends_training_at_a_sink_end(sink_size):
    # Sinks of 7 steps divide the 49-step epoch, so every sink ends at a multiple of 7; a sink
    # per epoch ends at multiples of 49.
    step = interrupted_step(f"dataset_sink_mode=True, sink_size={sink_size}")
    assert step > 0
    assert step % (7 if sink_size == 7 else 49) == 0, step
