"""Every script in examples/python runs to the end, on a few batches of Fashion-MNIST each, and
prints what it promises (its figures are not checked: a handful of batches proves nothing)."""
import os
import re
import shutil
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
    "pipeline.py": "python_multiprocessing=True: read 192 rows",
    "distributed.py": "rank 0 of 1: 3 steps of 64 rows",
}
# tests/CMakeLists.txt's environment for Open MPI jobs (as root, in a container, on 2 cores).
MPI_ENVIRONMENT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                   "OMPI_MCA_mpi_yield_when_idle": "1"}


def test_every_example_is_listed():
    scripts = {f for f in os.listdir(EXAMPLES) if f.endswith(".py")}
    assert scripts - {"lenet.py", "lenet_fashion.py"} == set(EXPECTED)


def run_example(script, launcher=()):
    # The kiln this test imported, wherever the PYTHONPATH that found it pointed.
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env = dict(os.environ, KILN_EXAMPLE_BATCHES="3", OMP_NUM_THREADS="1", **MPI_ENVIRONMENT,
               PYTHONPATH=os.pathsep.join([package_dir, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([*launcher, sys.executable, os.path.join(EXAMPLES, script), FASHION_MNIST],
                         cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="needs dataset-fashion-mnist")
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs(script):
    out = run_example(script)
    assert EXPECTED[script] in out, out


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="needs dataset-fashion-mnist")
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun (Debian's openmpi-bin)")
def test_distributed_example_runs_on_two_ranks_that_end_with_the_same_weights():
    out = run_example("distributed.py", ["mpirun", "-np", "2", "--oversubscribe", "--bind-to",
                                         "none"])
    # mpirun may join the ranks' lines: match each line's exact form, not whole lines.
    ranks = dict(re.findall(r"rank (\d) of 2: 3 steps of 64 rows in [\d.]+ s, "
                            r"weights checksum (\d+\.\d{6})", out))
    assert set(ranks) == {"0", "1"}, out
    assert ranks["0"] == ranks["1"], out
