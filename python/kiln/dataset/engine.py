"""Dataset: MindSpore's pipeline methods over Kiln's C++ pipeline.

Every dataset object carries `_native`, the bound C++ kiln::data::Dataset (what kiln.Model.train
runs). A pipeline's stages run on C++ threads; native transforms run there without the GIL, Python
sources and functions take it (or run in worker processes with python_multiprocessing=True).
"""

import weakref

import numpy as np

from kiln import _kiln
from . import _workers

_native = _kiln.dataset


def _names(columns):
    if columns is None:
        return []
    return [columns] if isinstance(columns, str) else list(columns)


def _workers_or_default(num_parallel_workers):
    return 0 if num_parallel_workers is None else int(num_parallel_workers)


def _function_name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__


class Dataset:
    """An immutable pipeline description; `_native` is the C++ dataset it stands for."""

    def __init__(self, native, worker_groups=()):
        self._native = native
        # The worker processes of python_multiprocessing=True sources and map functions: an
        # iterator that stops releases them, one stopped by Ctrl-C or an error interrupts them.
        self._worker_groups = tuple(worker_groups)

    def _derive(self, native, extra=()):
        return Dataset(native, self._worker_groups + tuple(extra))

    # ---- stages -----------------------------------------------------------------------------
    def map(self, operations, input_columns=None, output_columns=None, column_order=None,
            num_parallel_workers=None, python_multiprocessing=False, max_rowsize=None,
            callbacks=None):
        """Applies `operations` in order to `input_columns` (default: the first column). Native
        transforms run on the pipeline's threads without the GIL; Python callables are called with
        the columns as numpy arrays, in worker processes with python_multiprocessing=True."""
        del max_rowsize, callbacks  # MindSpore's shared-memory and callback knobs: not needed
        ops = operations if isinstance(operations, (list, tuple)) else [operations]
        if not ops:
            raise ValueError("map: operations is empty")
        natives, process_functions = [], []
        for op in ops:
            native = getattr(op, "_native", None)
            if native is not None:
                natives.append(native)
            elif callable(op):
                name = _function_name(op)
                if python_multiprocessing:
                    op = _workers.ProcessFunction(op, f"map[{name}]")
                    process_functions.append(op)
                natives.append(_native.PyFunc(op, name))
            else:
                raise TypeError(f"map: operation {op!r} is neither a transform nor callable")
        result = self._derive(
            self._native.map(natives, _names(input_columns), _names(output_columns),
                             _workers_or_default(num_parallel_workers)),
            process_functions)
        if column_order is not None:
            result = result.project(column_order)
        return result

    def batch(self, batch_size, drop_remainder=False, num_parallel_workers=None,
              per_batch_map=None, input_columns=None, output_columns=None, pad_info=None,
              python_multiprocessing=False, max_rowsize=None):
        """Groups rows into batches. ``per_batch_map(col_1, ..., batch_info)`` gets each batch's
        rows before they are stacked, one list of arrays per input column (default: every
        column) and a BatchInfo, and returns one list per input column (its rows may change
        shape and number); it runs on the batch stage's threads, under the GIL."""
        del max_rowsize
        if per_batch_map is None and (input_columns is not None or output_columns is not None):
            raise ValueError("batch: input_columns and output_columns go with per_batch_map")
        if per_batch_map is not None:
            if not callable(per_batch_map):
                raise TypeError(f"batch: per_batch_map {per_batch_map!r} is not callable")
            if output_columns is not None and _names(output_columns) != _names(input_columns):
                raise ValueError("batch: per_batch_map must return its input columns "
                                 f"{_names(input_columns)}; output_columns "
                                 f"{_names(output_columns)} that differ are not available")
            if python_multiprocessing:
                raise ValueError("batch: python_multiprocessing=True is not available for "
                                 "per_batch_map; it runs on the batch stage's threads")
        pads = {}
        for column, (shape, value) in (pad_info or {}).items():
            pads[column] = ([] if shape is None else [-1 if d is None else int(d) for d in shape],
                            float(value))
        return self._derive(self._native.batch(int(batch_size), bool(drop_remainder),
                                               max(1, _workers_or_default(num_parallel_workers)),
                                               pads, per_batch_map, _names(input_columns),
                                               BatchInfo))

    def shuffle(self, buffer_size):
        return self._derive(self._native.shuffle(int(buffer_size)))

    def repeat(self, count=None):
        return self._derive(self._native.repeat(-1 if count is None else int(count)))

    def skip(self, count):
        return self._derive(self._native.skip(int(count)))

    def take(self, count=-1):
        return self._derive(self._native.take(int(count)))

    def project(self, columns):
        return self._derive(self._native.project(_names(columns)))

    def rename(self, input_columns, output_columns):
        return self._derive(self._native.rename(_names(input_columns), _names(output_columns)))

    def zip(self, datasets):
        others = datasets if isinstance(datasets, (list, tuple)) else [datasets]
        extra = tuple(g for d in others for g in d._worker_groups)
        return self._derive(self._native.zip([d._native for d in others]), extra)

    def concat(self, datasets):
        others = datasets if isinstance(datasets, (list, tuple)) else [datasets]
        extra = tuple(g for d in others for g in d._worker_groups)
        return self._derive(self._native.concat([d._native for d in others]), extra)

    def __add__(self, other):
        return self.concat(other)

    # ---- facts ------------------------------------------------------------------------------
    def get_dataset_size(self):
        return self._native.get_dataset_size()

    def get_col_names(self):
        return self._native.get_col_names()

    def get_batch_size(self):
        return self._native.get_batch_size()

    def __repr__(self):
        return self._native.describe()

    # ---- iteration --------------------------------------------------------------------------
    def create_tuple_iterator(self, columns=None, num_epochs=-1, output_numpy=False,
                              do_copy=True):
        del do_copy  # rows are always handed over without a copy
        return TupleIterator(self, _names(columns), num_epochs, output_numpy)

    def create_dict_iterator(self, num_epochs=-1, output_numpy=False, do_copy=True):
        del do_copy
        return DictIterator(self, [], num_epochs, output_numpy)

    def __iter__(self):
        return self.create_tuple_iterator(num_epochs=1)

    def _release_workers(self):
        """Stops the worker processes of this dataset's Python map functions (they restart on
        the next use); a source's readers stop with their pipeline. Iterators call it when they
        stop, and so may code that ran `_native` itself (kiln.Model.train)."""
        for group in self._worker_groups:
            group.release()

    def _interrupt_workers(self):
        """Ends every worker process of this dataset at once (Ctrl-C, an error)."""
        for group in self._worker_groups:
            group.interrupt()


class BatchInfo:
    """What per_batch_map learns about its batch (MindSpore's BatchInfo)."""

    def __init__(self, batch_num, epoch_num):
        self._batch_num, self._epoch_num = batch_num, epoch_num

    def get_batch_num(self):
        """The batch's number in its epoch, from 0."""
        return self._batch_num

    def get_epoch_num(self):
        """The epoch's number, from 0."""
        return self._epoch_num


def _to_tensor_factory(output_numpy):
    if output_numpy:
        return None
    import kiln  # pylint: disable=import-outside-toplevel
    return getattr(kiln, "Tensor", None)


class TupleIterator:
    """Rows as lists of numpy arrays (output_numpy=True, or before kiln.Tensor exists) or
    kiln.Tensor. One `for` loop runs one epoch; the next loop runs the next epoch."""

    def __init__(self, dataset, columns, num_epochs, output_numpy):
        self._dataset = dataset
        self._it = dataset._native.create_tuple_iterator(columns, int(num_epochs))
        self._names = self._it.column_names
        self._tensor = _to_tensor_factory(output_numpy)
        self._finalizer = weakref.finalize(self, TupleIterator._shutdown, self._it, dataset)

    @staticmethod
    def _shutdown(native_iterator, dataset):
        native_iterator.stop()
        dataset._release_workers()

    def __iter__(self):
        return self

    def _next_row(self):
        if not self._finalizer.alive:
            raise StopIteration
        try:
            row = self._it.next()
        except BaseException:
            self._dataset._interrupt_workers()
            self.stop()
            raise
        if row is None:
            raise StopIteration
        if self._tensor is None:
            return list(row)
        return [self._tensor(a) for a in row]

    def __next__(self):
        return self._next_row()

    def stop(self):
        """Stops the pipeline, its threads and its worker processes."""
        self._finalizer()

    close = stop

    def get_col_names(self):
        return list(self._names)

    def summary(self):
        return self._it.summary()


class DictIterator(TupleIterator):
    """Rows as {column name: array or kiln.Tensor}."""

    def __next__(self):
        return dict(zip(self._names, self._next_row()))
