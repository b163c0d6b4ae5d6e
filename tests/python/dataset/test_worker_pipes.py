"""The pipes between the pipeline and its worker processes (python_multiprocessing=True): a worker
forked by one pipeline thread must not keep another worker's pipe open, or a read waiting for a
worker that died never ends, and a worker whose parent closes its pipe never sees it."""
import multiprocessing.context
import os
import signal
import threading
import time

import pytest

from kiln.dataset import _workers


def _echo(*args):
    return args


def _receive_in_thread(worker):
    """Waits for a reply from `worker` on a thread: the error it raised, or None while waiting."""
    outcome = {}

    def receive():
        try:
            worker._receive()
        except _workers.WorkerError as error:
            outcome["error"] = error

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    thread.join(5.0)
    return outcome.get("error")


def test_a_worker_started_while_another_starts_does_not_keep_its_pipe_open(monkeypatch):
    """Two pipeline threads start workers at once; each start is slowed so that without the
    start lock the second fork lands while the first worker's end of its pipe is still open
    here. Killing the first worker must then end a read waiting on it."""
    start = multiprocessing.context.ForkProcess.start

    def slow_start(self):
        start(self)
        time.sleep(0.3)

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", slow_start)
    workers = [None, None]

    def make(i):
        workers[i] = _workers.start_worker(_echo, f"worker {i}")

    first = threading.Thread(target=make, args=(0,))
    first.start()
    time.sleep(0.1)  # the first worker is inside its start
    make(1)
    first.join()
    try:
        os.kill(workers[0].pid, signal.SIGKILL)
        error = _receive_in_thread(workers[0])
        assert error is not None, "a read from the killed worker is still waiting after 5 s"
        assert "exited with code" in str(error)
        assert workers[1].call((7,))[0] == 7
    finally:
        for worker in workers:
            if worker is not None:
                worker.close()


def test_a_worker_sees_its_pipe_close_while_later_workers_run():
    """The parent closing a worker's pipe (without the polite stop) ends that worker, though a
    worker forked after it inherited this process's end of that pipe."""
    first = _workers.start_worker(_echo, "first")
    second = _workers.start_worker(_echo, "second")
    try:
        assert first.call((1,))[0] == 1 and second.call((2,))[0] == 2
        first._conn.close()
        first._process.join(5.0)
        assert not first._process.is_alive(), "the worker still runs 5 s after its pipe closed"
        assert first._process.exitcode == 0
        assert second.call((3,))[0] == 3
    finally:
        second.close()
        first.close()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
