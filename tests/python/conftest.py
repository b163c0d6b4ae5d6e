import pytest

import kiln
from kiln import _kiln

# One kernel thread: the tests check results, not speed, and a loaded CI machine makes
# OpenMP's spinning threads many times slower than one.
_kiln.set_num_threads(1)


@pytest.fixture(autouse=True)
def pynative_context():
    """Every test starts and ends in PYNATIVE_MODE without fusion."""
    kiln.set_context(mode=kiln.PYNATIVE_MODE, enable_graph_kernel=False)
    yield
    kiln.set_context(mode=kiln.PYNATIVE_MODE, enable_graph_kernel=False)
    kiln.reset_auto_parallel_context()
