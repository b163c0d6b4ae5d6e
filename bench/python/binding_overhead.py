"""The Python binding's cost per op: n relu calls on a one-element tensor made from Python,
minus the same n calls made from C++ (the kernel and dispatch alone). Prints one JSON line.

  PYTHONPATH=build/python /usr/bin/python3 bench/python/binding_overhead.py
"""
import json
import time

import numpy as np

import kiln
from kiln import _kiln, ops


def main(n=200_000, repeats=5):
    x = kiln.Tensor(np.ones(1, np.float32))
    relu = ops.relu
    python_best = cpp_best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            relu(x)
        python_best = min(python_best, time.perf_counter() - start)
        cpp_best = min(cpp_best, _kiln.ops._relu_loop_seconds(x, n))
    print(json.dumps({"python_us_per_op": python_best / n * 1e6,
                      "cpp_us_per_op": cpp_best / n * 1e6,
                      "binding_us_per_op": (python_best - cpp_best) / n * 1e6}))


if __name__ == "__main__":
    main()
