"""GeneratorDataset over a Python source that decodes PNG files with PIL,
python_multiprocessing=True with 2 workers, against torch's DataLoader with 2 workers running the
same function (the issue's target: >= 1.5x).

    PYTHONPATH=build/python /usr/bin/python3 bench/python/data_generator_bench.py

Prints images/s for each loader (best of --epochs epochs; Kiln runs them on one iterator, as
Model.train does; torch's DataLoader starts its workers each epoch unless they are persistent,
shown too) and the CPU time each spends per image, here and
in its worker processes: on a loaded machine the CPU figure is the one that compares the loaders,
since both are bound by the decode's CPU.
"""

import argparse
import os
import resource
import tempfile
import time

import numpy as np
from PIL import Image


class PngSource:
    """Row i: PNG file i decoded to uint8 HWC, and its label."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        with Image.open(self.paths[index]) as image:
            pixels = np.array(image.convert("RGB"))
        return pixels, np.array(index % 10, dtype=np.int32)


def make_pngs(folder, count, size):
    rng = np.random.default_rng(0)
    paths = []
    base = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    for i in range(count):
        # Smooth images with some noise: PNG sizes like photos', not like pure noise.
        image = (base // 4 + np.uint8(i % 64) + rng.integers(0, 8, base.shape, dtype=np.uint8))
        path = os.path.join(folder, f"{i:05d}.png")
        Image.fromarray(image.astype(np.uint8)).save(path)
        paths.append(path)
    return paths


def _cpu_seconds(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def time_epochs(run_epoch, epochs):
    """(images/s of the best epoch, CPU us per image of this process, of its worker processes).
    Worker CPU counts once the workers are reaped, so it is taken over all epochs."""
    best = float("inf")
    main0, workers0 = _cpu_seconds(resource.RUSAGE_SELF), _cpu_seconds(resource.RUSAGE_CHILDREN)
    total = 0
    for _ in range(epochs):
        start = time.perf_counter()
        rows = run_epoch()
        total += rows
        best = min(best, time.perf_counter() - start)
    main = (_cpu_seconds(resource.RUSAGE_SELF) - main0) / total * 1e6
    workers = (_cpu_seconds(resource.RUSAGE_CHILDREN) - workers0) / total * 1e6
    return rows / best, main, workers


def kiln_epoch(source, batch_size, workers, multiprocessing, epochs):
    """One iterator for all epochs, as kiln.Model.train and a MindSpore loop use it (its workers
    live as long as the iterator)."""
    import kiln.dataset as ds  # pylint: disable=import-outside-toplevel
    dataset = ds.GeneratorDataset(source, ["image", "label"], num_parallel_workers=workers,
                                  shuffle=False, python_multiprocessing=multiprocessing)
    dataset = dataset.batch(batch_size, drop_remainder=False)
    state = {"epochs_left": epochs}

    def run():
        if "iterator" not in state:
            state["iterator"] = dataset.create_tuple_iterator(num_epochs=epochs, output_numpy=True)
        rows = 0
        for image, _ in state["iterator"]:
            rows += image.shape[0]
        state["epochs_left"] -= 1
        if state["epochs_left"] == 0:
            state.pop("iterator").stop()  # reaps the workers, so their CPU time is counted
        return rows
    return run


def torch_epoch(source, batch_size, workers, persistent):
    import torch.utils.data  # pylint: disable=import-outside-toplevel

    class TorchSource(torch.utils.data.Dataset):
        def __len__(self):
            return len(source)

        def __getitem__(self, index):
            return source[index]

    loader = torch.utils.data.DataLoader(TorchSource(), batch_size=batch_size,
                                         num_workers=workers, shuffle=False,
                                         persistent_workers=persistent)

    def run():
        rows = 0
        for image, _ in loader:
            rows += image.shape[0]
        return rows
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--size", type=int, default=28, help="image edge in pixels")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        source = PngSource(make_pngs(folder, args.images, args.size))
        results = {}
        runs = [
            ("kiln GeneratorDataset, processes", kiln_epoch(source, args.batch_size,
                                                            args.workers, True, args.epochs)),
            ("kiln GeneratorDataset, threads", kiln_epoch(source, args.batch_size,
                                                          args.workers, False, args.epochs)),
            ("torch DataLoader", torch_epoch(source, args.batch_size, args.workers, False)),
            ("torch DataLoader, persistent workers", torch_epoch(source, args.batch_size,
                                                                 args.workers, True)),
        ]
        for name, run in runs:
            results[name] = time_epochs(run, args.epochs)
            rate, main, workers = results[name]
            if "persistent" in name:  # its workers are not reaped here: their CPU is not counted
                print(f"{name:36s} {rate:7.0f} images/s", flush=True)
                continue
            print(f"{name:36s} {rate:7.0f} images/s   CPU per image: {main:4.0f} us here + "
                  f"{workers:4.0f} us in workers = {main + workers:4.0f} us", flush=True)
        kiln, torch = results["kiln GeneratorDataset, processes"], results["torch DataLoader"]
        print(f"kiln processes / torch DataLoader: {kiln[0] / torch[0]:.2f}x images/s, "
              f"{sum(torch[1:]) / sum(kiln[1:]):.2f}x less CPU per image; {args.images} PNGs "
              f"{args.size}x{args.size}, batch {args.batch_size}, {args.workers} workers, "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
