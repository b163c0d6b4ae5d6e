"""The performance guide's calls outside the data pipeline, written as a MindSpore user writes
them (shared/mindspore-api-used.md, §3.2 mixed precision, §5 sink mode, §6.1 monitoring), with
only the imports changed. The guide leaves the network and data to the reader: a small CNN and
an in-memory data set stand in."""
import os

import numpy as np
import pytest

import kiln as ms
from kiln import Model, context, nn
from kiln.train.callback import Callback, LossMonitor, TimeMonitor

from kiln_test_data import ArrayDataset, fashion_like_batches


class YourNetwork(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode="same", has_bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=4, stride=4)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(4 * 7 * 7, 10)

    def construct(self, x):
        return self.fc(self.flatten(self.pool(self.relu(self.bn(self.conv(x))))))


class StepLosses(Callback):
    """A user's callback: keeps each step's loss (MindSpore's older step_end name)."""

    def __init__(self):
        super().__init__()
        self.losses = []
        self.steps = []

    def step_end(self, run_context):
        cb_params = run_context.original_args()
        self.losses.append(cb_params.net_outputs)
        self.steps.append(cb_params.cur_step_num)


def cpu_has_avx512():
    with open("/proc/cpuinfo") as f:
        return "avx512f" in f.read()


def make_train_ds(steps=6, batch_size=8):
    images, labels = fashion_like_batches(steps, batch_size)
    return ArrayDataset(images, labels, batch_size)


@pytest.mark.parametrize("amp_level", ["O0", "O2", "O3"])
@pytest.mark.parametrize("mode", [context.PYNATIVE_MODE, context.GRAPH_MODE],
                         ids=["pynative", "graph"])
def test_mixed_precision_section(mode, amp_level):  # guide §1 and §3.2
    if amp_level != "O0" and not cpu_has_avx512():
        pytest.skip("the engine's bf16 kernels (oneDNN) need AVX-512; this CPU has none")
    context.set_context(mode=mode, device_target="CPU", enable_graph_kernel=True)
    net = YourNetwork()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, loss_fn=loss, optimizer=opt, amp_level=amp_level, keep_batchnorm_fp32=True)
    record = StepLosses()
    model.train(2, make_train_ds(), callbacks=[record])
    assert record.steps == list(range(1, 13))
    assert all(np.isfinite(record.losses))
    assert model.global_step == 12


def test_sink_mode_logs_per_epoch(capfd):  # guide §5 and §6.1
    context.set_context(mode=context.GRAPH_MODE, device_target="CPU")
    net = YourNetwork()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, loss_fn=loss, optimizer=opt)
    train_ds = make_train_ds()
    time_cb = TimeMonitor(data_size=train_ds.get_dataset_size())
    loss_cb = LossMonitor()
    model.train(epoch=3, train_dataset=train_ds, callbacks=[time_cb, loss_cb],
                dataset_sink_mode=True)
    out = capfd.readouterr().out
    # One sink per epoch: the callbacks run at each epoch's end, where LossMonitor shows each
    # of the epoch's 6 steps (tests/python/test_sink_mode.py checks when the lines come).
    assert out.count("per step time") == 3, out
    assert [line.split(",")[0] for line in out.splitlines() if "loss is" in line] == \
        [f"epoch: {e} step: {s}" for e in (1, 2, 3) for s in range(1, 7)], out
    assert model.global_step == 18
    model.train(epoch=4, train_dataset=train_ds, callbacks=[LossMonitor()], initial_epoch=3)
    out = capfd.readouterr().out
    assert out.count("loss is") == 6, out  # without sink mode: one line per step, as it ends


def test_request_stop_from_a_python_callback():
    class StopAfterThree(Callback):
        def on_train_step_end(self, run_context):
            if run_context.original_args().cur_step_num == 3:
                run_context.request_stop()

    net = YourNetwork()
    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean'),
                  optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    model.train(5, make_train_ds(), callbacks=[StopAfterThree()])
    assert model.global_step == 3


def test_an_exception_in_a_python_callback_reaches_the_caller():
    class Broken(Callback):
        def step_end(self, run_context):
            raise KeyError("from the callback")

    net = YourNetwork()
    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean'),
                  optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    with pytest.raises(KeyError, match="from the callback"):
        model.train(1, make_train_ds(), callbacks=[Broken()])


def test_eval_predict_and_a_plain_iterable_is_refused():
    net = YourNetwork()
    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean'),
                  optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9),
                  metrics={"accuracy"})
    ds = make_train_ds()
    model.train(2, ds)
    result = model.eval(ds)
    assert set(result) == {"accuracy"} and 0.0 <= result["accuracy"] <= 1.0
    images, _ = fashion_like_batches(1, 8)
    logits = model.predict(ms.Tensor(images))
    assert logits.shape == (8, 10)
    with pytest.raises(TypeError, match="not a Kiln data set"):
        model.train(1, [(images, np.zeros(8, np.int32))])


def test_checkpoints_round_trip(tmp_path):
    from kiln.train.callback import CheckpointConfig, ModelCheckpoint

    net = YourNetwork()
    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean'),
                  optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    config = CheckpointConfig(save_checkpoint_steps=2, keep_checkpoint_max=2)
    ckpt_cb = ModelCheckpoint(prefix="net", directory=str(tmp_path), config=config)
    model.train(1, make_train_ds(), callbacks=[ckpt_cb])
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".safetensors"))
    assert len(files) == 2, files
    assert os.path.exists(ckpt_cb.latest_checkpoint)

    path = tmp_path / "final.ckpt"
    ms.save_checkpoint(net, path)
    other = YourNetwork()
    images, _ = fashion_like_batches(1, 8)
    x = ms.Tensor(images)
    before = Model(other).predict(x).asnumpy()
    missing = ms.load_param_into_net(other, ms.load_checkpoint(path))
    assert missing == []
    after = Model(other).predict(x).asnumpy()
    expected = Model(net).predict(x).asnumpy()
    assert not np.allclose(before, expected)
    np.testing.assert_array_equal(after, expected)
