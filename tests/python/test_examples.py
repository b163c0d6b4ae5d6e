"""Every script in examples/python runs to the end, on a few batches of Fashion-MNIST each, and
prints what it promises (its figures are not checked: a handful of batches proves nothing)."""
import os
import subprocess
import sys

import pytest

import kiln
from kiln_test_data import EXAMPLES

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist

# Each example and a line its output must contain.
EXPECTED = {
    "modes.py": "GRAPH_MODE: one epoch in",
    "amp.py": "O2 fp16 with dynamic loss scaling:",
    "monitoring.py": "losses per epoch:",
    "sink_mode.py": "sink ending at step",
    "profiling.py": "profile written:",
}


def test_every_example_is_listed():
    scripts = {f for f in os.listdir(EXAMPLES) if f.endswith(".py")}
    assert scripts - {"lenet.py", "lenet_fashion.py"} == set(EXPECTED)


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="needs dataset-fashion-mnist")
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs(script):
    # The kiln this test imported, wherever the PYTHONPATH that found it pointed.
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env = dict(os.environ, KILN_EXAMPLE_BATCHES="3", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([package_dir, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), FASHION_MNIST],
                         cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert EXPECTED[script] in run.stdout, run.stdout
