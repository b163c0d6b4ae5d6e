"""Native sources and transforms from Python: zero-copy rows, record files, image folders,
MNIST files, and vision transforms against numpy."""

import gzip
import os
import struct

import numpy as np
import pytest
from PIL import Image

import kiln.dataset as ds
import kiln.dataset.transforms as transforms
import kiln.dataset.vision as vision


def _address(array):
    return array.__array_interface__["data"][0]


def test_numpy_slices_rows_view_the_callers_array():
    data = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    dataset = ds.NumpySlicesDataset(data, column_names=["x"], shuffle=False)
    rows = [row[0] for row in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)]
    assert len(rows) == 6
    for i, row in enumerate(rows):
        np.testing.assert_array_equal(row, data[i])
        assert _address(row) == _address(data) + i * data.strides[0], "the row was copied"


def test_batches_are_handed_over_without_a_copy():
    dataset = ds.NumpySlicesDataset(np.ones((8, 3), np.float32), ["x"], shuffle=False).batch(4)
    iterator = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
    first = next(iterator)[0]
    again = np.asarray(first)
    assert _address(again) == _address(first)
    assert first.base is not None, "the array should view the pipeline's tensor"


def test_vision_transforms_match_numpy():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    np.testing.assert_allclose(vision.Rescale(1 / 255, -0.5)(image),
                               image.astype(np.float32) / 255 - 0.5, atol=1e-6)
    np.testing.assert_array_equal(vision.HWC2CHW()(image), image.transpose(2, 0, 1))
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    np.testing.assert_allclose(vision.Normalize(mean, std)(image),
                               (image.astype(np.float32) - mean) / std, rtol=1e-5)
    assert vision.RandomCrop((3, 4))(image).shape == (3, 4, 3)
    assert vision.Resize((10, 14))(image).shape == (10, 14, 3)
    flipped = vision.RandomHorizontalFlip(prob=1.0)(image)
    np.testing.assert_array_equal(flipped, image[:, ::-1])
    assert transforms.TypeCast(np.int32)(image).dtype == np.int32
    composed = transforms.Compose([vision.Rescale(2.0, 0.0), vision.HWC2CHW()])(image)
    np.testing.assert_allclose(composed, image.transpose(2, 0, 1).astype(np.float32) * 2)


def test_file_writer_and_mind_dataset_round_trip(tmp_path):
    path = str(tmp_path / "train.mindrecord")
    writer = ds.FileWriter(file_name=path, shard_num=2)
    writer.add_schema({"label": {"type": "int32"}, "image": {"type": "bytes"},
                       "feature": {"type": "float32", "shape": [2, -1]}}, "test")
    rows = [{"label": i, "image": bytes([i, i + 1, i + 2]),
             "feature": np.full((2, i + 1), i, dtype=np.float32)} for i in range(10)]
    writer.write_raw_data(rows)
    writer.commit()
    assert sorted(os.listdir(tmp_path)) == ["train.mindrecord0", "train.mindrecord1"]

    dataset = ds.MindDataset(dataset_files=path + "0", columns_list=["label", "image", "feature"],
                             shuffle=False)
    assert dataset.get_dataset_size() == 10
    seen = set()
    for label, image, feature in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True):
        i = int(label)
        seen.add(i)
        assert image.tolist() == [i, i + 1, i + 2]
        np.testing.assert_array_equal(feature, np.full((2, i + 1), i, dtype=np.float32))
    assert seen == set(range(10))


def test_file_writer_names_a_bad_field(tmp_path):
    writer = ds.FileWriter(str(tmp_path / "x.rec"))
    with pytest.raises(RuntimeError, match="'label'.*'int8'"):
        writer.add_schema({"label": {"type": "int8"}})


def test_image_folder_decodes_pngs(tmp_path):
    colors = {"cat": (200, 10, 10), "dog": (10, 200, 10)}
    for name, color in colors.items():
        (tmp_path / name).mkdir()
        for k in range(3):
            Image.new("RGB", (6, 4), color).save(tmp_path / name / f"{k}.png")
    dataset = ds.ImageFolderDataset(str(tmp_path), shuffle=False)
    dataset = dataset.map(operations=[vision.Decode(), vision.HWC2CHW()], input_columns="image")
    labels = []
    for image, label in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True):
        color = list(colors.values())[int(label)]
        assert image.shape == (3, 4, 6)
        assert image[:, 0, 0].tolist() == list(color)
        labels.append(int(label))
    assert labels == [0, 0, 0, 1, 1, 1]


def _write_idx(path, magic, array):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape))
        f.write(array.tobytes())


def test_mnist_dataset_reads_idx_files(tmp_path):
    images = np.arange(4 * 28 * 28, dtype=np.uint32).reshape(4, 28, 28).astype(np.uint8)
    labels = np.array([3, 1, 4, 1], dtype=np.uint8)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", 0x803, images)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", 0x801, labels)
    dataset = ds.MnistDataset(str(tmp_path), usage="train", shuffle=False)
    rows = list(dataset.create_tuple_iterator(num_epochs=1, output_numpy=True))
    assert [int(r[1]) for r in rows] == [3, 1, 4, 1]
    np.testing.assert_array_equal(rows[2][0][:, :, 0], images[2])


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="column_names"):
        ds.GeneratorDataset(lambda: iter([]))
    with pytest.raises(ValueError, match="random-access"):
        ds.GeneratorDataset(lambda: iter([]), ["x"], shuffle=True)
    with pytest.raises(TypeError, match="neither a transform nor callable"):
        ds.NumpySlicesDataset(np.zeros((2, 2), np.float32), ["x"]).map(operations=[3])
