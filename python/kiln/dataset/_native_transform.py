"""The base of transforms whose work is done in C++."""


class NativeTransform:
    """`_native` is the C++ transform map() hands the pipeline; calling the object applies it to
    numpy arrays at once (MindSpore's eager mode)."""

    _native = None

    def __call__(self, *arrays):
        return self._native(*arrays)

    def __repr__(self):
        return f"{type(self).__name__}()"
