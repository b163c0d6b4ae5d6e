"""Kiln's dtypes with MindSpore's names (``mindspore.common.dtype``, often imported as mstype)."""
from .._kiln import DType

float32 = DType.float32
float16 = DType.float16
bfloat16 = DType.bfloat16
int32 = DType.int32
int64 = DType.int64
uint8 = DType.uint8
bool_ = DType.bool_
# MindSpore's short aliases.
float_ = float32
half = float16
int_ = int32
