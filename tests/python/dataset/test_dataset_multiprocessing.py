"""python_multiprocessing=True: the same batches in the same order as False, Python work in
worker processes, errors with their traceback within a second, and nothing left behind."""

import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

import kiln.dataset as ds


class PidSource:
    """Row i: an array made from i, and the id of the process that made it."""

    def __len__(self):
        return 48

    def __getitem__(self, index):
        return np.arange(index, index + 5, dtype=np.int32), np.array(os.getpid())


def offset_and_pid(values):
    return values * 3 + 1, np.array(os.getpid())


def _pipeline(multiprocessing):
    dataset = ds.GeneratorDataset(PidSource(), ["values", "source_pid"], num_parallel_workers=2,
                                  shuffle=True, python_multiprocessing=multiprocessing)
    dataset = dataset.map(operations=offset_and_pid, input_columns="values",
                          output_columns=["values", "map_pid"], num_parallel_workers=2,
                          python_multiprocessing=multiprocessing)
    return dataset.batch(8, drop_remainder=True)


def _run(multiprocessing):
    ds.config.set_seed(1234)
    batches, source_pids, map_pids = [], set(), set()
    for values, source_pid, map_pid in _pipeline(multiprocessing).create_tuple_iterator(
            columns=["values", "source_pid", "map_pid"], num_epochs=1, output_numpy=True):
        batches.append(values.copy())
        source_pids.update(source_pid.tolist())
        map_pids.update(map_pid.tolist())
    return batches, source_pids, map_pids


def _alive(pid):
    return os.path.exists(f"/proc/{pid}")


def _shared_memory_segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith("psm_")}


def test_processes_give_the_same_batches_in_the_same_order():
    segments_before = _shared_memory_segments()
    threads_batches, threads_sources, threads_maps = _run(False)
    process_batches, process_sources, process_maps = _run(True)
    assert threads_sources == threads_maps == {os.getpid()}
    assert os.getpid() not in process_sources | process_maps
    assert process_sources and process_maps
    assert len(threads_batches) == len(process_batches) == 6
    for a, b in zip(threads_batches, process_batches):
        np.testing.assert_array_equal(a, b)
    firsts = [int(v) for batch in threads_batches for v in (batch[:, 0] - 1) // 3]
    assert sorted(firsts) == list(range(48)) and firsts != list(range(48))
    # The iterator is gone: so are its workers and their shared memory.
    time.sleep(0.1)
    assert not [pid for pid in process_sources | process_maps if _alive(pid)]
    assert _shared_memory_segments() <= segments_before


def _raise_on_row(limit):
    def generate():
        for i in range(limit):
            yield (np.array([i], dtype=np.int32),)
        generate.raised_at = time.monotonic()
        raise ValueError(f"corrupt row {limit}")
    return generate


class RaisingSource:
    def __len__(self):
        return 16

    def __getitem__(self, index):
        if index == 5:
            RaisingSource.raised_at = time.monotonic()
            raise KeyError(f"no row {index}")
        return (np.array([index], dtype=np.int32),)


def _expect_traceback(dataset, raised_at, *expected):
    with pytest.raises(RuntimeError) as error:
        for _ in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True):
            pass
    elapsed = time.monotonic() - raised_at()
    assert elapsed < 1.0, f"the error took {elapsed:.2f} s to reach the consumer"
    message = str(error.value)
    assert "Traceback (most recent call last)" in message
    for text in expected:
        assert text in message, message


def test_a_raising_generator_surfaces_its_traceback_within_a_second():
    generate = _raise_on_row(3)
    dataset = ds.GeneratorDataset(generate, ["x"])
    _expect_traceback(dataset, lambda: generate.raised_at, "ValueError: corrupt row 3",
                      "in generate")


def test_a_raising_source_in_a_worker_process_surfaces_its_traceback_within_a_second():
    dataset = ds.GeneratorDataset(RaisingSource(), ["x"], num_parallel_workers=2,
                                  shuffle=False, python_multiprocessing=True)
    # raised_at is set in the worker: measure from the consumer's side of the fork instead.
    start = time.monotonic()
    _expect_traceback(dataset, lambda: start, "KeyError: 'no row 5'", "in __getitem__",
                      "worker process")


def test_a_raising_map_function_in_a_worker_process_surfaces_its_traceback():
    def explode(x):
        if int(x[0]) == 4:
            raise ZeroDivisionError("row 4")
        return x

    dataset = ds.NumpySlicesDataset(np.arange(8, dtype=np.int32).reshape(8, 1), ["x"],
                                    shuffle=False)
    dataset = dataset.map(operations=explode, python_multiprocessing=True)
    start = time.monotonic()
    _expect_traceback(dataset, lambda: start, "ZeroDivisionError: row 4", "in explode")


class SlowSource:
    def __len__(self):
        return 100

    def __getitem__(self, index):
        time.sleep(30)
        return (np.array([index], dtype=np.int32),)


def test_ctrl_c_stops_the_pipeline_and_its_workers():
    segments_before = _shared_memory_segments()
    dataset = ds.GeneratorDataset(SlowSource(), ["x"], num_parallel_workers=2, shuffle=False,
                                  python_multiprocessing=True)
    iterator = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
    workers = []

    def interrupt():
        workers.extend(p.pid for p in multiprocessing.active_children())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(1.0, interrupt)
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(iterator)
    assert time.monotonic() - start < 4.0
    assert workers, "no worker process was running"
    assert not [pid for pid in workers if _alive(pid)]
    assert _shared_memory_segments() <= segments_before


def test_a_generator_function_runs_in_one_worker_process():
    def generate():
        for i in range(40):
            yield np.full((3,), i, dtype=np.int64), np.array(os.getpid())

    rows = {}
    for multiprocessing in (False, True):
        if multiprocessing:
            dataset = ds.GeneratorDataset(generate, ["x", "pid"], num_parallel_workers=2,
                                          python_multiprocessing=True)
        else:
            with pytest.warns(UserWarning, match="read in one thread"):
                dataset = ds.GeneratorDataset(generate, ["x", "pid"], num_parallel_workers=2,
                                              python_multiprocessing=False)
        dataset = dataset.batch(16)
        rows[multiprocessing] = [
            (x.tolist(), set(pid.tolist()))
            for x, pid in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)]
    assert [x for x, _ in rows[False]] == [x for x, _ in rows[True]]
    assert len(rows[True]) == 3 and rows[True][0][0][0] == [0, 0, 0]
    process_pids = set().union(*(p for _, p in rows[True]))
    assert len(process_pids) == 1 and os.getpid() not in process_pids
