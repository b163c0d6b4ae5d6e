"""Profiling (guide §6.2, which uses MindInsight): kiln.Profiler around training writes a run
folder with a Chrome trace (trace.json, for Perfetto), CSV tables of ops and steps, and one
self-contained report.html: op times, memory over time, the data pipeline's stages and the
compiled graph, with recommendations from what was measured."""
import os
import sys
import tempfile

import kiln
from kiln import context

from lenet_fashion import fashion_mnist, lenet_model

context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
# The run folder: the second argument, or one in the temporary directory (rewritten each run).
output = sys.argv[2] if len(sys.argv) > 2 else os.path.join(tempfile.gettempdir(), "kiln_profile")
model = lenet_model()
profiler = kiln.Profiler(output_path=output)
model.train(1, fashion_mnist())
profiler.annotate("model", "LeNet-5 (examples/python/lenet.py)")
report = profiler.analyse()
print(f"profile written: {report} ({os.path.getsize(report) // 1024} KiB); open it in a browser")
