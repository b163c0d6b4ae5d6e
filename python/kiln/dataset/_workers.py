"""Worker processes for python_multiprocessing=True.

Each pipeline thread that runs Python code (a source's reader, a map's Python function) gets its
own worker process, forked from this one, so the Python work runs outside this process's GIL.
Requests go down a pipe; arrays travel through shared memory that this process creates, owns and
unlinks (a worker only maps it), so a killed worker leaks nothing. A worker's exception comes back
with its traceback; a worker that dies is reported by its exit code.
"""

import ctypes
import mmap
import multiprocessing
import os
import signal
import struct
import threading
import traceback
import weakref
from multiprocessing import shared_memory

import numpy as np

_ALIGN = 64
_INITIAL_BYTES = 1 << 20
_JOIN_SECONDS = 1.0


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
    """The worker's loop: (args meta | None) in, ("ok", meta) | ("grow", bytes) | ("error", text)
    out. `work(*args)` returns one value or a tuple of values."""
    parent_end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    _die_with_parent()
    request = reply = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        kind, payload = message
        if kind == "map":  # (request name, size, reply name, size): new segments
            for m in (request, reply):
                if m is not None:
                    m.close()
            request = _Mapping(payload[0], payload[1]) if payload[0] else None
            reply = _Mapping(payload[2], payload[3])
            continue
        try:
            if kind == "rows":  # one reply for several rows: work(index) for each
                rows = []
                for index in payload:
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
            if size > reply.size:
                conn.send(("grow", size))
                kind, payload = conn.recv()  # the parent's "map" with a larger reply segment
                reply.close()
                reply = _Mapping(payload[2], payload[3])
                if payload[0]:
                    request.close()
                    request = _Mapping(payload[0], payload[1])
            conn.send(("ok", (counts, _write(reply.map, arrays, places))))
        except Exception:  # pylint: disable=broad-except
            conn.send(("error", traceback.format_exc()))


class WorkerError(RuntimeError):
    """A worker process raised (its traceback is in the message) or died."""


class Worker:
    """One worker process calling `work(*args)`; call() is used by one thread at a time."""

    def __init__(self, work, what):
        context = multiprocessing.get_context("fork")
        self._what = what
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(work, child, self._conn),
                                        daemon=True, name=what)
        self._process.start()
        child.close()
        self._request = None
        self._reply = None
        self._send_segments(request_bytes=0, reply_bytes=_INITIAL_BYTES)

    @property
    def pid(self):
        return self._process.pid

    def _segment(self, old, size):
        if old is not None:
            if old.size >= size:
                return old
            old.close()
            old.unlink()
        return shared_memory.SharedMemory(create=True, size=max(size, _INITIAL_BYTES))

    def _send_segments(self, request_bytes, reply_bytes):
        if request_bytes:
            self._request = self._segment(self._request, request_bytes)
        self._reply = self._segment(self._reply, reply_bytes)
        request = self._request
        self._conn.send(("map", (request.name if request else "", request.size if request else 0,
                                 self._reply.name, self._reply.size)))

    def _receive(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._process.join(_JOIN_SECONDS)
            raise WorkerError(f"{self._what}: worker process {self._process.pid} exited with "
                              f"code {self._process.exitcode}") from None

    def call_rows(self, indices):
        """Runs work(index) for each index in the worker; returns the rows (tuples of arrays
        viewing the reply segment, valid until the next call)."""
        return self.call(indices, kind="rows")

    def call(self, args, pass_by_value=False, kind=None):
        """Runs work(*args) in the worker; returns a tuple of arrays viewing the reply segment,
        valid until the next call."""
        if kind is not None:
            self._conn.send((kind, args))
        elif pass_by_value:
            self._conn.send(("value", args))
        else:
            arrays = [np.ascontiguousarray(_as_array(a)) for a in args]
            places, size = _layout(arrays)
            if self._request is None or size > self._request.size:
                self._send_segments(request_bytes=size, reply_bytes=self._reply.size)
            meta = _write(self._request.buf, arrays, places)
            self._conn.send(("args", meta))
        kind, payload = self._receive()
        if kind == "grow":
            self._send_segments(request_bytes=0, reply_bytes=payload)
            kind, payload = self._receive()
        if kind == "error":
            raise WorkerError(f"{self._what}: exception in worker process "
                              f"{self._process.pid}:\n{payload}")
        counts, meta = payload
        arrays = _read(self._reply.buf, meta)
        if counts is None:
            return arrays
        rows, start = [], 0
        for count in counts:
            rows.append(arrays[start:start + count])
            start += count
        return rows

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
        for segment in (self._request, self._reply):
            if segment is not None:
                segment.close()
                segment.unlink()
        self._request = self._reply = None


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
    """read(index) for one pipeline reader thread, served by its own worker process."""

    def __init__(self, source, what):
        self._worker = start_worker(source.__getitem__, what)

    def interrupt(self):
        self._worker.interrupt()

    def __call__(self, index):
        return self._worker.call_rows([int(index)])[0]

    def read_many(self, indices):
        return self._worker.call_rows([int(i) for i in indices])

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
