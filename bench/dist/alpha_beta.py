#!/usr/bin/env python3
"""Fits the alpha-beta model t(n) = alpha + beta * n to measured all-reduce times and predicts the
gradient all-reduce of ResNet-20 and of a ResNet-50-sized gradient set at 8 to 1,024 ranks.

    mpirun -np 2 build/bench/kiln_allreduce_bench --csv allreduce.csv
    bench/dist/alpha_beta.py allreduce.csv

The CSV (ranks, bytes, mpi_s, kiln_s, kiln_async_s; the fit uses the async path, which
data parallelism takes) comes from 2 ranks, where a ring all-reduce is one
exchange of n/2 bytes each way: t2(n) = 2 * alpha + 2 * (1/2) * n * beta, so alpha and beta are
fitted per message. At p ranks (bandwidth-optimal algorithms, as Thakur, Rabenseifner and Gropp
give them):
  ring:                   2 (p - 1) alpha + 2 (p - 1) / p * n * beta
  tree (recursive halving
  and doubling):          2 log2(p) alpha + 2 (p - 1) / p * n * beta
  binary tree
  (reduce + broadcast):   2 log2(p) (alpha + n * beta)
The reduction's arithmetic (gamma) is left out: it is cheaper than the copies on these CPUs.
"""
import csv
import math
import sys

MODELS = {
    "ResNet-20 (0.27 M parameters, 1.1 MB)": 272_474 * 4,
    "ResNet-50 (25.6 M parameters, 102 MB)": 25_557_032 * 4,
}


def fit(points):
    """Least squares for t = a + b * x, each point weighted by 1/t^2 (relative error), so the
    small messages fix the latency and the large ones the bandwidth."""
    w = [1.0 / (y * y) for _, y in points]
    sw = sum(w)
    mx = sum(wi * x for wi, (x, _) in zip(w, points)) / sw
    my = sum(wi * y for wi, (_, y) in zip(w, points)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, (x, _) in zip(w, points))
    sxy = sum(wi * (x - mx) * (y - my) for wi, (x, y) in zip(w, points))
    b = sxy / sxx
    return my - b * mx, b


def main(path):
    rows = list(csv.DictReader(open(path)))
    # On 2 ranks one message is each rank's half of the buffer: t = 2 alpha + n beta.
    points = [(float(r["bytes"]), float(r["kiln_async_s"])) for r in rows if int(r["ranks"]) == 2]
    if len(points) < 2:
        sys.exit("alpha_beta: need 2-rank measurements of at least two sizes")
    a2, b = fit(points)
    alpha = max(a2 / 2, 1e-7)
    beta = b
    print(f"fitted on {len(points)} sizes, 2 ranks: alpha = {alpha * 1e6:.2f} us, "
          f"beta = {beta * 1e9:.3f} ns/byte ({1 / beta / 1e9:.2f} GB/s)")
    print("measured vs model (2 ranks):")
    for n, t in points:
        print(f"  {int(n):>10} B  measured {t * 1e6:10.1f} us  model {(2 * alpha + n * beta) * 1e6:10.1f} us")
    for name, n in MODELS.items():
        print(f"\n{name}: predicted all-reduce per step, ms")
        print(f"  {'ranks':>6} {'ring':>10} {'tree':>10} {'binary tree':>12}")
        for p in (8, 16, 64, 256, 1024):
            ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta
            tree = 2 * math.log2(p) * alpha + 2 * (p - 1) / p * n * beta
            binary = 2 * math.log2(p) * (alpha + n * beta)
            print(f"  {p:>6} {ring * 1e3:>10.2f} {tree * 1e3:>10.2f} {binary * 1e3:>12.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "allreduce.csv")
