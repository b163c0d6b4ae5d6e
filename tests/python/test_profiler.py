"""kiln.Profiler as MindSpore scripts call it: made before training, analyse() after."""
import json
import os

import pytest

import kiln
from kiln import Model, nn

from kiln_test_data import ArrayDataset, fashion_like_batches


def small_model():
    net = nn.SequentialCell([nn.Conv2d(1, 4, 3, has_bias=True), nn.ReLU(), nn.Flatten(),
                             nn.Dense(4 * 28 * 28, 10)])
    return Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                 optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_profiler_writes_the_run_folder_of_a_training(tmp_path, mode):
    kiln.set_context(mode=mode, device_target="CPU")
    images, labels = fashion_like_batches(5, 8)
    model = small_model()
    profiler = kiln.Profiler(output_path=str(tmp_path / "prof"), profile_communication=False)
    model.train(1, ArrayDataset(images, labels, 8))
    profiler.annotate("model", "small CNN")
    report = profiler.analyse()
    assert report == os.path.join(profiler.output_path, "report.html")
    for name in ("trace.json", "profile.json", "ops.csv", "steps.csv", "report.html"):
        assert os.path.getsize(os.path.join(profiler.output_path, name)) > 0, name
    with open(os.path.join(profiler.output_path, "trace.json")) as f:
        events = json.load(f)["traceEvents"]
    # Every op the steps ran is in the trace: convolutions among them, eager or compiled.
    assert any("conv" in e.get("name", "") for e in events)
    assert profiler._native.steps == 5
    assert profiler._native.op_launches > 5
    with open(report) as f:
        assert "small CNN" in f.read()


def test_profiler_arguments_and_one_profiler_at_a_time(tmp_path):
    with pytest.raises(TypeError, match="unknown argument\\(s\\) \\['output'\\]"):
        kiln.Profiler(output=str(tmp_path))
    first = kiln.Profiler(output_path=str(tmp_path / "a"))
    with pytest.raises(RuntimeError, match="another profiler is collecting"):
        kiln.Profiler(output_path=str(tmp_path / "b"))
    first.stop()
    later = kiln.Profiler(output_path=str(tmp_path / "c"), start_profile=False)
    later.start()
    later.stop()
