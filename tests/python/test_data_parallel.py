"""Data-parallel training from Python is single-process training: 2 ranks under mpirun
(DATA_PARALLEL, gradients_mean=True), each on half of every batch, give the losses and weights of
one process on the whole batch (data_parallel_training.py does the training)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln

TESTS = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(TESTS, "data_parallel_training.py")
# tests/CMakeLists.txt's environment for Open MPI jobs (as root, in a container, on 2 cores).
MPI_ENVIRONMENT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMP_NUM_THREADS": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                   "OMPI_MCA_mpi_yield_when_idle": "1"}


def train(mode, out_prefix, launcher=()):
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env = dict(os.environ, **MPI_ENVIRONMENT,
               PYTHONPATH=os.pathsep.join([package_dir, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([*launcher, sys.executable, SCRIPT, mode, str(out_prefix)], cwd=TESTS,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None,
                    reason="needs mpirun (Debian's openmpi-bin) to start 2 ranks")
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_two_ranks_on_half_batches_train_as_one_process_on_whole_batches(mode, tmp_path):
    train(mode, tmp_path / "single")
    train(mode, tmp_path / "parallel",
          ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"])
    single = np.load(tmp_path / "single.rank0.npz")
    ranks = [np.load(tmp_path / f"parallel.rank{r}.npz") for r in (0, 1)]

    single_losses = single["losses"]
    assert len(single_losses) == 12 and np.all(np.isfinite(single_losses))
    assert single_losses[-1] < single_losses[0]  # it learns, so the comparison means something
    # Each rank's loss is its half's mean; the whole batch's is their mean.
    parallel_losses = (ranks[0]["losses"] + ranks[1]["losses"]) / 2
    np.testing.assert_allclose(parallel_losses, single_losses, rtol=1e-5)
    names = [n for n in single.files if n != "losses"]
    assert names
    for name in names:
        for r in ranks:
            np.testing.assert_allclose(r[name], single[name], rtol=1e-5, atol=1e-7, err_msg=name)
