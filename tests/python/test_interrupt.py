"""Ctrl-C while Model.train runs in the engine (GIL released) stops it with KeyboardInterrupt."""
import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import kiln
    from kiln import nn, _kiln
    from kiln_test_data import ArrayDataset, fashion_like_batches
    _kiln.set_num_threads(1)
    images, labels = fashion_like_batches(50, 8)
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(784, 10)])
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    print("training", flush=True)
    try:
        model.train(100000, ArrayDataset(images, labels, 8))
    except KeyboardInterrupt:
        print("interrupted at step", model.global_step, flush=True)
        sys.exit(3)
""")


def test_ctrl_c_ends_training_with_keyboard_interrupt():
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=tests)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "training"
    time.sleep(0.5)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 3, (out, err)
    assert "interrupted at step" in out
    assert time.monotonic() - start < 5
