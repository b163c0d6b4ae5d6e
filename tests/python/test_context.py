"""set_context, the context alias module, auto-parallel settings and communication."""
import pytest

import kiln
from kiln import _kiln, context
from kiln.communication import get_group_size, get_rank, init


def test_set_context_as_the_guide_writes_it():  # guide §1
    context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
    assert context.get_context("mode") == context.GRAPH_MODE == kiln.GRAPH_MODE
    assert context.get_context("enable_graph_kernel") is True
    kiln.set_context(mode=kiln.PYNATIVE_MODE)  # other keys keep their values
    assert kiln.get_context("mode") == context.PYNATIVE_MODE
    assert kiln.get_context("enable_graph_kernel") is True


def test_set_context_refuses_other_devices_and_unknown_keys():
    with pytest.raises(RuntimeError, match="Ascend"):
        context.set_context(device_target="Ascend")
    with pytest.raises(TypeError, match="'enable_graph_kernels'"):
        context.set_context(enable_graph_kernels=True)
    with pytest.raises(RuntimeError, match="mode 7"):
        context.set_context(mode=7)


@pytest.fixture
def saved_context():
    """The process's settings before the test, restored after it whatever the test set."""
    saved = _kiln.get_context()
    yield
    _kiln.set_context(saved)


def test_set_context_chooses_the_convolution_algorithm(saved_context):
    assert context.get_context("conv_algorithm") == "auto"
    for algorithm in ("direct", "winograd", "auto"):
        context.set_context(conv_algorithm=algorithm)
        assert context.get_context("conv_algorithm") == algorithm
        assert _kiln.get_context().conv_algorithm == algorithm  # the engine's own setting
    with pytest.raises(RuntimeError, match="conv_algorithm 'fft' is not one of auto, direct"):
        context.set_context(conv_algorithm="fft")
    assert context.get_context("conv_algorithm") == "auto"  # a refused call changes nothing


def test_set_context_keeps_every_setting_not_passed(saved_context):
    context.set_context(mode=context.GRAPH_MODE, enable_graph_kernel=True, micro_batches=2,
                        save_graphs_path="/tmp/kiln-graphs", conv_algorithm="direct")
    before = {key: context.get_context(key) for key in context._CONTEXT_KEYS}
    context.set_context(device_id=3)  # a key without effect on a CPU
    context.set_context(save_graphs=True)
    assert {key: context.get_context(key) for key in context._CONTEXT_KEYS} == before
    context.set_context(mode=context.PYNATIVE_MODE)
    after = dict(before, mode=context.PYNATIVE_MODE)
    assert {key: context.get_context(key) for key in context._CONTEXT_KEYS} == after
    assert _kiln.get_context().conv_algorithm == "direct"


def test_communication_alone_is_a_job_of_one():  # guide §4.2
    init()
    assert get_rank() == 0
    assert get_group_size() == 1


def test_auto_parallel_context_data_parallel():  # guide §4.2, as far as the engine has it
    rank_size = get_group_size()
    context.set_auto_parallel_context(parallel_mode=context.ParallelMode.DATA_PARALLEL,
                                      gradients_mean=True, device_num=rank_size)
    assert context.get_auto_parallel_context("parallel_mode") == "data_parallel"
    assert context.get_auto_parallel_context("gradients_mean") is True
    context.reset_auto_parallel_context()
    assert context.get_auto_parallel_context("parallel_mode") == "stand_alone"


def test_auto_parallel_context_takes_the_search_and_its_memory_limit():  # guide §4.2
    context.set_auto_parallel_context(parallel_mode=context.ParallelMode.AUTO_PARALLEL,
                                      search_mode="dynamic_programming", gradients_mean=True,
                                      device_num=1, memory_limit_mb=512)
    assert context.get_auto_parallel_context("parallel_mode") == "auto_parallel"
    assert context.get_auto_parallel_context("search_mode") == "dynamic_programming"
    assert context.get_auto_parallel_context("memory_limit_mb") == 512
    with pytest.raises(RuntimeError, match="search_mode 'annealing' is not one of"):
        context.set_auto_parallel_context(search_mode="annealing")
    with pytest.raises(RuntimeError, match="memory_limit_mb must be >= 0"):
        context.set_auto_parallel_context(memory_limit_mb=-1)
    assert context.get_auto_parallel_context("search_mode") == "dynamic_programming"
    assert context.get_auto_parallel_context("op_times") == "measured"
    context.set_auto_parallel_context(op_times="estimated")
    assert context.get_auto_parallel_context("op_times") == "estimated"
    with pytest.raises(RuntimeError, match="op_times 'guessed' is not one of measured, estimated"):
        context.set_auto_parallel_context(op_times="guessed")
    context.reset_auto_parallel_context()
    assert context.get_auto_parallel_context("parallel_mode") == "stand_alone"
