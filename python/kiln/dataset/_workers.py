"""Worker processes for python_multiprocessing=True.

Each pipeline thread that runs Python code (a source's reader, a map's Python function) gets its
own worker process, forked from this one, so the Python work runs outside this process's GIL.
Requests go down a pipe; arrays travel through shared memory that this process creates, owns and
unlinks (a worker only maps it), so a killed worker leaks nothing. A worker's exception comes back
with its traceback; a worker that dies is reported by its exit code.
"""

import collections
import ctypes
import mmap
import multiprocessing
import os
import signal
import threading
import traceback
import weakref
from multiprocessing import shared_memory

import numpy as np

_ALIGN = 64
_INITIAL_BYTES = 1 << 20
_JOIN_SECONDS = 1.0

# Held from a worker's pipe until its process is started and this process's copy of the child's
# end is closed: a worker forked by another pipeline thread inside that window would keep the
# child's end open too, and a read waiting for the first worker would never see it die.
_fork_lock = threading.Lock()


def _new_fork_lock():
    global _fork_lock
    _fork_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_fork_lock)


def _as_array(value):
    """A row value as an array the pipeline takes (bytes and str as uint8)."""
    if isinstance(value, (bytes, bytearray)):
        return np.frombuffer(value, dtype=np.uint8)
    if isinstance(value, str):
        return np.frombuffer(value.encode(), dtype=np.uint8)
    return np.asarray(value)


def _layout(arrays):
    """(offset, nbytes) of each array packed at aligned offsets, and the total size."""
    places, end = [], 0
    for a in arrays:
        places.append((end, a.nbytes))
        end += (a.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    return places, end


def _write(buffer, arrays, places):
    meta = []
    for a, (offset, nbytes) in zip(arrays, places):
        view = np.ndarray(a.shape, dtype=a.dtype, buffer=buffer, offset=offset)
        view[...] = a
        meta.append((a.dtype.str, a.shape, offset))
    return meta


def _read(buffer, meta):
    return tuple(np.ndarray(shape, dtype=np.dtype(dtype), buffer=buffer, offset=offset)
                 for dtype, shape, offset in meta)


class _Mapping:
    """A shared memory segment mapped without registering it with the resource tracker: the
    parent created it and is the one that unlinks it."""

    def __init__(self, name, size):
        import _posixshmem
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name, self.size = name, size

    def close(self):
        self.map.close()


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(work, conn, parent_end):
    """The worker's loop. In: ("request_segment", (name, size)), ("reply_segment", (slot, name,
    size)), ("rows", (slot, indices)), ("args", meta), ("value", args) or None to stop. Out, one
    reply per request in order: ("ok", (counts, meta)) in the request's reply slot,
    ("inline", (counts, arrays)) when they do not fit it, or ("error", traceback).
    `work(*args)` returns one value or a tuple of values."""
    parent_end.close()
    # The other workers' ends in the parent came along with the fork: closed, so each of those
    # workers sees its parent's end close when the parent closes it.
    for sibling in list(_live_workers):
        sibling._conn.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    _die_with_parent()
    request, replies = None, {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        kind, payload = message
        if kind == "request_segment":
            if request is not None:
                request.close()
            request = _Mapping(*payload)
            continue
        if kind == "reply_segment":
            slot, name, size = payload
            if slot in replies:
                replies[slot].close()
            replies[slot] = _Mapping(name, size)
            continue
        try:
            slot = 0
            if kind == "rows":  # one reply for several rows: work(index) for each
                slot, indices = payload
                rows = []
                for index in indices:
                    try:
                        rows.append(_row_tuple(work(index)))
                    except Exception as error:
                        raise RuntimeError(f"reading row {index}") from error
                counts = [len(r) for r in rows]
                values = [v for r in rows for v in r]
            else:
                args = payload if kind == "value" else _read(request.map, payload)
                result = work(*args)
                values = result if isinstance(result, tuple) else (result,)
                counts = None
            arrays = [_as_array(v) for v in values]
            places, size = _layout(arrays)
            reply = replies.get(slot)
            if reply is None or size > reply.size:
                conn.send(("inline", (counts, [np.ascontiguousarray(a) for a in arrays])))
            else:
                conn.send(("ok", (counts, _write(reply.map, arrays, places))))
        except Exception:  # pylint: disable=broad-except
            conn.send(("error", traceback.format_exc()))


class WorkerError(RuntimeError):
    """A worker process raised (its traceback is in the message) or died."""


def _release(segment, retired):
    """Unlinks a segment this process created and closes it; one that arrays still view is kept
    in `retired` (closed with its Worker) instead."""
    segment.unlink()
    try:
        segment.close()
    except BufferError:
        retired.append(segment)


class Worker:
    """One worker process calling `work(*args)`, used by one thread at a time. call() runs one
    request and waits for it; send_rows()/receive_rows() keep up to two row requests in flight,
    each with its own reply segment, so the process reads the next block while this one takes
    the last."""

    SLOTS = 2

    def __init__(self, work, what):
        context = multiprocessing.get_context("fork")
        self._what = what
        with _fork_lock:
            self._conn, child = context.Pipe()
            self._process = context.Process(target=_serve, args=(work, child, self._conn),
                                            daemon=True, name=what)
            self._process.start()
            child.close()
        self._request = None
        self._replies = [None] * self.SLOTS
        self._retired = []
        self._sent = 0  # row requests sent: the next one's slot is _sent % SLOTS
        for slot in range(self.SLOTS):
            self._send_reply_segment(slot, _INITIAL_BYTES)

    @property
    def pid(self):
        return self._process.pid

    def _send_reply_segment(self, slot, size):
        """A reply segment for `slot` of at least `size` bytes; the caller knows the worker is not
        writing that slot now (its last request there was answered)."""
        old = self._replies[slot]
        if old is not None:
            _release(old, self._retired)
        segment = shared_memory.SharedMemory(create=True, size=max(size, _INITIAL_BYTES))
        self._replies[slot] = segment
        self._conn.send(("reply_segment", (slot, segment.name, segment.size)))

    def _receive(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._process.join(_JOIN_SECONDS)
            raise WorkerError(f"{self._what}: worker process {self._process.pid} exited with "
                              f"code {self._process.exitcode}") from None

    def _answer(self, slot):
        """The reply to the oldest request in flight, whose reply slot is `slot`: (counts,
        arrays); arrays view the slot's segment until its next request."""
        kind, payload = self._receive()
        if kind == "error":
            raise WorkerError(f"{self._what}: exception in worker process "
                              f"{self._process.pid}:\n{payload}")
        counts, data = payload
        if kind == "inline":  # too large for the segment: the next reply there will fit
            self._send_reply_segment(slot, _layout(data)[1])
            return counts, tuple(data)
        return counts, _read(self._replies[slot].buf, data)

    def send_rows(self, indices):
        """Asks for work(index) of each index; returns the slot its receive_rows() reads."""
        slot = self._sent % self.SLOTS
        self._sent += 1
        self._conn.send(("rows", (slot, [int(i) for i in indices])))
        return slot

    def receive_rows(self, slot):
        """The rows of the oldest send_rows() in flight (tuples of arrays viewing its reply
        segment, valid until that slot's next request)."""
        counts, arrays = self._answer(slot)
        rows, start = [], 0
        for count in counts:
            rows.append(arrays[start:start + count])
            start += count
        return rows

    def call(self, args, pass_by_value=False):
        """Runs work(*args) in the worker (no row requests in flight); returns a tuple of arrays
        viewing the reply segment, valid until the next call."""
        if pass_by_value:
            self._conn.send(("value", args))
        else:
            arrays = [np.ascontiguousarray(_as_array(a)) for a in args]
            places, size = _layout(arrays)
            if self._request is None or size > self._request.size:
                if self._request is not None:
                    _release(self._request, self._retired)
                self._request = shared_memory.SharedMemory(create=True,
                                                           size=max(size, _INITIAL_BYTES))
                self._conn.send(("request_segment", (self._request.name, self._request.size)))
            meta = _write(self._request.buf, arrays, places)
            self._conn.send(("args", meta))
        return self._answer(0)[1]  # a call's reply goes to slot 0

    def interrupt(self):
        """Ends the process at once (a call waiting on it then fails), for Ctrl-C and errors."""
        if self._process.is_alive():
            self._process.terminate()

    def close(self):
        """Stops the process (politely, then by signal), reaps it and unlinks the segments."""
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._process.join(_JOIN_SECONDS)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(_JOIN_SECONDS)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
        for segment in [self._request] + self._replies:
            if segment is not None:
                _release(segment, self._retired)
        self._request, self._replies = None, [None] * self.SLOTS


_live_workers = weakref.WeakSet()


def start_worker(work, what):
    worker = Worker(work, what)
    _live_workers.add(worker)
    return worker


def close_all_workers():
    for worker in list(_live_workers):
        try:
            worker.close()
        except Exception:  # pylint: disable=broad-except
            pass


class WorkerGroup:
    """The readers of one source that run in worker processes (they stop with their pipeline;
    interrupt() ends them at once, for Ctrl-C and errors)."""

    def __init__(self):
        self._readers = weakref.WeakSet()

    def add(self, reader):
        self._readers.add(reader)
        return reader

    def interrupt(self):
        for reader in list(self._readers):
            reader.interrupt()

    def release(self):
        """Nothing: readers are closed by the pipeline that made them."""


class SourceReader:
    """read(index) for one pipeline reader thread, served by its own worker process. Blocks the
    engine announces (will_read) are asked for at once, so the process decodes the next block
    while this thread takes the last."""

    def __init__(self, source, what):
        self._worker = start_worker(source.__getitem__, what)
        self._in_flight = collections.deque()  # (indices, reply slot), oldest first

    def interrupt(self):
        self._worker.interrupt()

    def will_read(self, indices):
        indices = [int(i) for i in indices]
        self._in_flight.append((indices, self._worker.send_rows(indices)))

    def __call__(self, index):
        return self.read_many([index])[0]

    def read_many(self, indices):
        indices = [int(i) for i in indices]
        if self._in_flight and self._in_flight[0][0] != indices:
            # Not the block announced next: drop what was asked for ahead.
            while self._in_flight:
                self._worker.receive_rows(self._in_flight.popleft()[1])
        if not self._in_flight:
            self.will_read(indices)
        return self._worker.receive_rows(self._in_flight.popleft()[1])

    def close(self):
        self._worker.close()
        _live_workers.discard(self._worker)


class IteratorReader:
    """An iterable source read in one worker process, one row per request."""

    def __init__(self, make_iterator, what):
        state = {}

        def next_row():
            if "it" not in state:
                state["it"] = make_iterator()
            try:
                return (True,) + tuple(_row_tuple(next(state["it"])))
            except StopIteration:
                return (False,)

        self._worker = start_worker(next_row, what)
        self._done = False

    def interrupt(self):
        self._worker.interrupt()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        row = self._worker.call((), pass_by_value=True)
        if not bool(row[0]):
            self._done = True
            raise StopIteration
        return row[1:]

    def close(self):
        self._worker.close()
        _live_workers.discard(self._worker)


def _row_tuple(row):
    return row if isinstance(row, (tuple, list)) else (row,)


class ProcessFunction:
    """A map's Python function run in worker processes, one per pipeline thread that calls it.
    Threads are told apart by their OS id: the pipeline's threads are not Python threads."""

    def __init__(self, fn, what):
        self._fn = fn
        self._what = what
        self._lock = threading.Lock()
        self._workers = {}

    def __call__(self, *args):
        key = threading.get_ident()
        worker = self._workers.get(key)
        if worker is None:
            with self._lock:
                worker = start_worker(self._fn, self._what)
                self._workers[key] = worker
        result = worker.call(args)
        return result if len(result) != 1 else result[0]

    def interrupt(self):
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.interrupt()

    def release(self):
        self.close()

    def close(self):
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.close()
            _live_workers.discard(worker)
