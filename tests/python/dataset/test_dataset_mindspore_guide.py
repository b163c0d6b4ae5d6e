"""The data-pipeline calls of MindSpore's performance guide (shared/mindspore-api-used.md §2.2,
§4.3) as a user writes them, with only the import lines changed from mindspore to kiln."""

import numpy as np

import kiln.dataset as ds
import kiln.dataset.transforms as transforms
import kiln.dataset.vision as vision


class DataGenerator:
    """Random-access source: image i is filled with i % 251, its label is i."""

    def __init__(self, rows=96, height=8, width=6):
        self.rows, self.height, self.width = rows, height, width

    def __getitem__(self, index):
        image = np.full((self.height, self.width, 3), index % 251, dtype=np.uint8)
        image[0, 0, 1] = 7  # a pixel that HWC2CHW must move to channel 1
        return image, np.array(index, dtype=np.int32)

    def __len__(self):
        return self.rows


def test_section_2_2_generator_map_batch():
    data_generator = DataGenerator()
    num_workers = 2
    batch_size = 16
    dataset = ds.GeneratorDataset(source=data_generator, column_names=["image", "label"],
                                  num_parallel_workers=num_workers, shuffle=True)
    trans = [vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()]
    dataset = dataset.map(operations=trans, input_columns="image",
                          num_parallel_workers=num_workers, python_multiprocessing=False)
    dataset = dataset.batch(batch_size, drop_remainder=True)

    assert dataset.get_dataset_size() == 96 // batch_size
    labels = []
    for image, label in dataset.create_tuple_iterator(output_numpy=True):
        assert image.shape == (batch_size, 3, 8, 6) and image.dtype == np.float32
        assert label.shape == (batch_size,) and label.dtype == np.int32
        for row, index in zip(image, label):
            expected = np.full((3, 8, 6), (index % 251) / 255.0, dtype=np.float32)
            expected[1, 0, 0] = 7 / 255.0
            np.testing.assert_allclose(row, expected, rtol=1e-6)
        labels.extend(label.tolist())
    assert sorted(labels) == list(range(96))
    assert labels != list(range(96)), "shuffle=True left the rows in order"


def test_section_2_2_typecast_and_dict_iterator():
    dataset = ds.GeneratorDataset(source=DataGenerator(rows=10), column_names=["image", "label"],
                                  shuffle=False)
    dataset = dataset.map(operations=transforms.TypeCast(np.int64), input_columns="label")
    rows = list(dataset.create_dict_iterator(num_epochs=1, output_numpy=True))
    assert [int(r["label"]) for r in rows] == list(range(10))
    assert rows[0]["label"].dtype == np.int64


def test_section_4_3_sharded_generator():
    data_source = DataGenerator(rows=64)
    rank_size, batch_size = 2, 8
    seen = []
    for rank_id in range(rank_size):
        dataset = ds.GeneratorDataset(source=data_source, column_names=["data", "label"],
                                      num_shards=rank_size, shard_id=rank_id)
        dataset = dataset.batch(batch_size, drop_remainder=True)
        assert dataset.get_dataset_size() == 64 // rank_size // batch_size
        shard = [int(x) for _, label in dataset.create_tuple_iterator(output_numpy=True)
                 for x in label]
        assert len(shard) == 32
        seen.append(set(shard))
    assert not seen[0] & seen[1], "the two shards share rows"
    assert seen[0] | seen[1] == set(range(64))


def test_epochs_continue_across_for_loops():
    dataset = ds.GeneratorDataset(source=DataGenerator(rows=6), column_names=["image", "label"],
                                  shuffle=False).batch(4)
    iterator = dataset.create_tuple_iterator(num_epochs=2, output_numpy=True)
    first = [label.tolist() for _, label in iterator]
    second = [label.tolist() for _, label in iterator]
    assert first == second == [[0, 1, 2, 3], [4, 5]]
    assert list(iterator) == []


def test_generator_function_source_and_python_map():
    def data_generator():
        for i in range(5):
            yield np.array([i, i + 1], dtype=np.float64), i

    dataset = ds.GeneratorDataset(source=data_generator, column_names=["data", "label"])
    dataset = dataset.map(operations=lambda x: x * 2, input_columns="data")
    rows = list(dataset.create_tuple_iterator(output_numpy=True, num_epochs=1))
    assert [r[0].tolist() for r in rows] == [[2 * i, 2 * i + 2] for i in range(5)]
    assert rows[0][0].dtype == np.float32  # Kiln has no float64 tensors
    assert [int(r[1]) for r in rows] == list(range(5))


def test_shuffle_repeat_skip_take_rename_project():
    base = ds.NumpySlicesDataset({"a": np.arange(10, dtype=np.int32),
                                  "b": np.arange(10, dtype=np.int64) * 2}, shuffle=False)
    dataset = base.shuffle(buffer_size=10).repeat(2)
    assert dataset.get_dataset_size() == 20
    values = [int(a) for a, _ in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)]
    assert sorted(values) == sorted(list(range(10)) * 2) and values[:10] != list(range(10))
    renamed = base.skip(2).take(3).rename("b", "double").project(["double"])
    for d in (base, dataset, renamed):  # what kiln.Model.train runs
        assert type(d._native).__module__.startswith("kiln._kiln")
        assert type(d._native).__name__ == "Dataset"
    assert renamed.get_col_names() == ["double"]
    rows = [int(r["double"]) for r in renamed.create_dict_iterator(num_epochs=1,
                                                                     output_numpy=True)]
    assert rows == [4, 6, 8]
