"""kiln.Tensor: numpy in and out without copies where promised, dtypes, arithmetic."""
import numpy as np
import pytest

import kiln
from kiln import Tensor


def test_a_contiguous_array_is_viewed_not_copied():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = Tensor(array)
    assert tensor._data_ptr == array.ctypes.data
    array[0, 0] = 42.0  # the tensor sees writes to the array: same memory
    assert tensor.asnumpy()[0, 0] == 42.0


def test_asnumpy_views_the_tensor_and_keeps_it_alive():
    tensor = kiln.ops.add_scalar(Tensor(np.zeros((2, 3), np.float32)), 1.5)
    view = tensor.asnumpy()
    assert view.ctypes.data == tensor._data_ptr
    del tensor
    np.testing.assert_array_equal(view, np.full((2, 3), 1.5, np.float32))


def test_the_array_outlives_its_python_name_inside_the_tensor():
    tensor = Tensor(np.arange(6, dtype=np.int64))
    np.testing.assert_array_equal(tensor.asnumpy(), np.arange(6))
    assert tensor.dtype == kiln.int64


def test_layouts_that_cannot_be_viewed_are_copied():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    transposed = Tensor(array.T)
    assert transposed._data_ptr != array.ctypes.data
    np.testing.assert_array_equal(transposed.asnumpy(), array.T)
    readonly = array.copy()
    readonly.setflags(write=False)
    assert Tensor(readonly)._data_ptr != readonly.ctypes.data


def test_float64_becomes_float32_and_unknown_dtypes_are_refused():
    tensor = Tensor(np.array([0.5, 1.5]))
    assert tensor.dtype == kiln.float32
    np.testing.assert_array_equal(tensor.asnumpy(), [0.5, 1.5])
    with pytest.raises(RuntimeError, match="complex128"):
        Tensor(np.array([1 + 2j]))


def test_dtype_names_and_bfloat16_round_trip():
    assert kiln.float32 == kiln.dtype.float32 and kiln.bfloat16 != kiln.float16
    values = np.array([1.0, 2.5, -3.0], np.float32)
    b = Tensor(values, dtype=kiln.bfloat16)
    assert b.dtype == kiln.bfloat16
    out = b.asnumpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, values)  # exactly representable in bf16


def test_python_scalars_lists_and_arithmetic():
    a = Tensor([[1.0, 2.0], [3.0, 4.0]])
    b = Tensor(np.array([[0.5, 0.5], [2.0, 2.0]], np.float32))
    np.testing.assert_allclose((a + b).asnumpy(), [[1.5, 2.5], [5.0, 6.0]])
    np.testing.assert_allclose((a * 2 - 1).asnumpy(), [[1, 3], [5, 7]])
    np.testing.assert_allclose((1 - a).asnumpy(), [[0, -1], [-2, -3]])
    np.testing.assert_allclose((a / b).asnumpy(), [[2, 4], [1.5, 2]])
    np.testing.assert_allclose((a @ b).asnumpy(), a.asnumpy() @ b.asnumpy())
    assert a.shape == (2, 2) and a.ndim == 2 and a.size == 4
    assert Tensor(3.0).item() == 3.0
    np.testing.assert_array_equal(np.asarray(a.reshape(4)), [1, 2, 3, 4])


def test_a_shape_mismatch_names_the_op_and_shapes():
    with pytest.raises(ValueError, match=r"\[2, 3\].*\[4\]|\[4\].*\[2, 3\]"):
        Tensor(np.zeros((2, 3), np.float32)) + Tensor(np.zeros(4, np.float32))
