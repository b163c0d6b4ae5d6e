#pragma once
// Tensors across the Python boundary (python/CONTRACT.md, seam 2).
//
// to_numpy: a numpy array viewing the tensor's memory (no copy; the array keeps the tensor's
// storage alive). bf16 has no numpy dtype, so a bf16 tensor comes back as a float32 copy. A
// writable view leaves the tensor's memory untracked (core/tensor.h's Storage::writes: numpy may
// change it unseen); a read-only one, for printing, does not.
//
// from_numpy: a Tensor viewing the array's memory when `copy` is false and the layout allows it
// (C-contiguous, aligned, writeable, a dtype Kiln has); the tensor keeps the array alive, and the
// array is released under the GIL. Otherwise a contiguous copy: float64 becomes f32 (Kiln has no
// f64), other numpy dtypes Kiln lacks are refused with an error naming them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::python {

pybind11::array to_numpy(const Tensor& tensor, bool writable = true);
Tensor from_numpy(pybind11::array array, bool copy);

// The numpy dtype of a Kiln dtype (bf16: float32, the dtype to_numpy gives it), and back
// (throws kiln::Error naming a numpy dtype Kiln lacks).
pybind11::dtype numpy_dtype(DType dtype);
DType kiln_dtype(const pybind11::dtype& dtype);

// A kernel size, stride, padding or dilation as MindSpore and PyTorch take it: an int or a pair
// (throws kiln::Error naming `what` for anything else).
std::array<int64_t, 2> pair_of(const pybind11::object& value, const char* what);

}  // namespace kiln::python
