"""nn.WithLossCell and nn.TrainOneStepCell as MindSpore scripts use them: a training loop of
their own, or Model(train_net); both train exactly what Model(net, loss_fn, optimizer) trains."""
import sys

import numpy as np
import pytest

import kiln
from kiln import Model, Tensor, nn

from kiln_test_data import EXAMPLES, ArrayDataset, fashion_like_batches

sys.path.insert(0, EXAMPLES)
from lenet import LeNet5  # noqa: E402  (the examples' network)


def fresh(seed=1):
    kiln.set_seed(seed)
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    return net, loss, opt


def reference_losses(images, labels, batch_size):
    net, loss, opt = fresh()
    model = Model(net, loss_fn=loss, optimizer=opt)
    losses = [model.train_step(Tensor(images[i:i + batch_size]), Tensor(labels[i:i + batch_size]))
              for i in range(0, len(labels), batch_size)]
    return losses, net


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_train_one_step_cell_trains_as_model_does(mode):
    kiln.set_context(mode=mode, device_target="CPU")
    images, labels = fashion_like_batches(8, 8)
    expected, reference = reference_losses(images, labels, 8)

    net, loss, opt = fresh()
    net_with_loss = nn.WithLossCell(net, loss)
    train_net = nn.TrainOneStepCell(net_with_loss, opt)
    train_net.set_train()
    losses = []
    for i in range(0, len(labels), 8):
        out = train_net(Tensor(images[i:i + 8]), Tensor(labels[i:i + 8]))
        assert isinstance(out, Tensor) and out.shape == ()
        losses.append(float(out.asnumpy()))
    assert expected[-1] < expected[0]
    assert losses == expected
    for a, b in zip(net.trainable_params(), reference.trainable_params()):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    # The loss of the wrapped network itself, without a step.
    value = net_with_loss(Tensor(images[:8]), Tensor(labels[:8]))
    assert np.isfinite(value.asnumpy())


def test_wrappers_keep_the_networks_parameter_names():
    net, loss, opt = fresh()
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    names = [name for name, _ in net.parameters_and_names()]
    assert names[:2] == ["conv1.weight", "conv1.bias"]
    assert [name for name, _ in train_net.parameters_and_names()] == names
    assert len(train_net.trainable_params()) == len(names)
    # So a checkpoint of the wrapper loads into the bare network.
    train_net.set_train(False)
    assert not net.training


def test_model_of_a_train_one_step_cell_or_of_a_network_with_its_loss(tmp_path):
    images, labels = fashion_like_batches(6, 8)
    dataset = ArrayDataset(images, labels, 8)

    def trained(make_model):
        record = []

        class Losses(kiln.train.callback.Callback):
            def on_train_step_end(self, run_context):
                record.append(run_context.original_args().net_outputs)

        net, loss, opt = fresh()
        make_model(net, loss, opt).train(1, dataset, callbacks=[Losses()])
        return record, net

    expected, _ = trained(lambda net, loss, opt: Model(net, loss_fn=loss, optimizer=opt))
    wrapped, _ = trained(lambda net, loss, opt: Model(nn.TrainOneStepCell(
        nn.WithLossCell(net, loss), opt)))
    with_loss, net = trained(lambda net, loss, opt: Model(nn.WithLossCell(net, loss),
                                                          optimizer=opt))

    class OwnLoss(nn.Cell):  # a network that computes its loss itself, as MindSpore allows
        def __init__(self, backbone, loss):
            super().__init__(auto_prefix=False)
            self.backbone = backbone
            self.loss = loss

        def construct(self, data, label):
            return self.loss(self.backbone(data), label)

    own, _ = trained(lambda net, loss, opt: Model(OwnLoss(net, loss), optimizer=opt))
    assert len(expected) == 6
    assert wrapped == expected and with_loss == expected and own == expected
    path = str(tmp_path / "wrapped.safetensors")
    kiln.save_checkpoint(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits()), path)
    fresh_net, _, _ = fresh(seed=5)
    assert kiln.load_param_into_net(fresh_net, kiln.load_checkpoint(path)) == []
    for a, b in zip(fresh_net.trainable_params(), net.trainable_params()):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_wrappers_refuse_what_they_cannot_train():
    net, loss, opt = fresh()
    with pytest.raises(TypeError, match="WithLossCell: loss_fn must be a loss"):
        nn.WithLossCell(net, "mse")
    with pytest.raises(TypeError, match="TrainOneStepCell: optimizer must be an optimizer"):
        nn.TrainOneStepCell(nn.WithLossCell(net, loss), None)
    with pytest.raises(ValueError, match="sens=2.0 is not available"):
        nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt, sens=2.0)
    train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    x = Tensor(np.zeros((1, 1, 28, 28), np.float32))
    with pytest.raises(ValueError, match=r"takes \(data, label\), got 1 input\(s\)"):
        train_net(x)
    # Every column but the last goes to the backbone, whose construct says what it takes.
    with pytest.raises(TypeError, match=r"LeNet5.construct\(\) takes 2 positional arguments"):
        train_net(x, x, x)
