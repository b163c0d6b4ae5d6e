"""Samplers (which rows an epoch reads, in what order) and batch's per_batch_map."""
import numpy as np
import pytest

import kiln.dataset as ds


class Numbered:
    """Row i is (i,): a random-access source whose rows say which they are."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (np.array(i, dtype=np.int32),)


def epochs_of(dataset, epochs=2):
    it = dataset.create_tuple_iterator(num_epochs=epochs, output_numpy=True)
    return [[int(row[0]) for row in it] for _ in range(epochs)]


def generator(sampler, n=10, workers=2):
    return ds.GeneratorDataset(Numbered(n), ["i"], sampler=sampler, num_parallel_workers=workers,
                               python_multiprocessing=False)


def test_sequential_and_subset_samplers_read_those_rows_in_that_order():
    assert epochs_of(generator(ds.SequentialSampler())) == [list(range(10))] * 2
    assert epochs_of(generator(ds.SequentialSampler(start_index=2, num_samples=3))) == \
        [[2, 3, 4]] * 2
    assert epochs_of(generator(ds.SubsetSampler([5, 1, 3]))) == [[5, 1, 3]] * 2
    assert epochs_of(generator([3, 3, 0])) == [[3, 3, 0]] * 2  # any iterable of indices


def test_random_samplers_permute_each_epoch():
    ds.config.set_seed(7)
    first, second = epochs_of(generator(ds.RandomSampler(), n=32))
    assert sorted(first) == list(range(32)) and sorted(second) == list(range(32))
    assert first != second and first != list(range(32))
    assert len(epochs_of(generator(ds.RandomSampler(num_samples=4)))[0]) == 4
    subset = [0, 2, 4, 6, 8, 10, 12, 14]
    a, b = epochs_of(generator(ds.SubsetRandomSampler(subset), n=16), epochs=2)
    assert sorted(a) == subset and sorted(b) == subset and a != b


def test_distributed_sampler_gives_each_shard_its_own_rows():
    shards = [epochs_of(generator(ds.DistributedSampler(2, k, shuffle=False)), 1)[0]
              for k in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 5
    assert sorted(shards[0] + shards[1]) == list(range(10))


def test_samplers_on_arrays_and_the_options_they_replace():
    data = np.arange(6, dtype=np.int32)
    sliced = ds.NumpySlicesDataset(data, ["i"], sampler=ds.SubsetSampler([4, 0]))
    assert epochs_of(sliced, 1) == [[4, 0]]
    with pytest.raises(ValueError, match="give a sampler or shuffle/num_shards/shard_id"):
        ds.GeneratorDataset(Numbered(4), ["i"], sampler=ds.RandomSampler(), shuffle=True)
    with pytest.raises(ValueError, match="indices \\[7\\] are outside the source's 4 rows"):
        generator(ds.SubsetSampler([1, 7]), n=4)
    with pytest.raises(ValueError, match="MnistDataset: SubsetSampler picks rows by index"):
        ds.MnistDataset("/nonexistent", sampler=ds.SubsetSampler([1]))
    with pytest.raises(ValueError, match="replacement=True is not available"):
        ds.RandomSampler(replacement=True)


def variable_rows(n):
    """Row i: a vector of i % 3 + 1 values, all equal to i."""
    return ds.GeneratorDataset([(np.full(i % 3 + 1, i, np.float32), np.array(i, np.int32))
                                for i in range(n)], ["x", "i"], shuffle=False)


def test_per_batch_map_pads_each_batch_and_knows_where_it_is():
    seen = []

    def pad_to_longest(xs, indices, batch_info):
        seen.append((batch_info.get_epoch_num(), batch_info.get_batch_num()))
        width = max(len(x) for x in xs)
        return [np.pad(x, (0, width - len(x)), constant_values=-1) for x in xs], indices

    dataset = variable_rows(7).batch(3, per_batch_map=pad_to_longest,
                                     input_columns=["x", "i"], num_parallel_workers=2)
    it = dataset.create_tuple_iterator(num_epochs=2, output_numpy=True)
    for _ in range(2):
        batches = list(it)
        assert [b[0].shape for b in batches] == [(3, 3), (3, 3), (1, 1)]
        np.testing.assert_array_equal(batches[0][0], [[0, -1, -1], [1, 1, -1], [2, 2, 2]])
        np.testing.assert_array_equal(batches[2][1], [6])
    assert sorted(seen) == [(e, b) for e in (0, 1) for b in (0, 1, 2)]


def test_per_batch_map_may_change_the_number_of_rows_of_a_batch():
    def keep_even(indices, batch_info):
        return [i for i in indices if int(i) % 2 == 0]

    dataset = ds.NumpySlicesDataset(np.arange(8, dtype=np.int32), ["i"], shuffle=False)
    it = dataset.batch(4, per_batch_map=keep_even).create_tuple_iterator(num_epochs=1,
                                                                         output_numpy=True)
    assert [b[0].tolist() for b in it] == [[0, 2], [4, 6]]


def test_per_batch_map_errors_name_the_function_and_the_batch():
    def broken(xs, indices, batch_info):
        if batch_info.get_batch_num() == 1:
            raise KeyError("no such row")
        return xs, indices

    rows = ds.NumpySlicesDataset((np.zeros((6, 2), np.float32), np.arange(6, dtype=np.int32)),
                                 ["x", "i"], shuffle=False)
    it = rows.batch(2, per_batch_map=broken).create_tuple_iterator(num_epochs=1)
    with pytest.raises(RuntimeError) as error:
        list(it)
    message = str(error.value)
    assert "per_batch_map" in message and "broken" in message and "KeyError" in message
    assert "batch 1 of epoch 0" in message

    def one_value(xs, indices, batch_info):
        return xs

    it = rows.batch(2, per_batch_map=one_value).create_tuple_iterator(num_epochs=1)
    with pytest.raises(RuntimeError, match="returned 1 values for 2 input columns"):
        list(it)
    with pytest.raises(ValueError, match="output_columns \\['y'\\] that differ"):
        variable_rows(4).batch(2, per_batch_map=one_value, input_columns=["x"],
                               output_columns=["y"])
