"""kiln.Profiler: MindSpore's Profiler over the engine's (op times, steps and their phases,
memory over time, the data pipeline, the compiled graphs)::

    profiler = kiln.Profiler(output_path="./profiler_data")
    model.train(1, train_ds)
    profiler.analyse()   # trace.json (Perfetto), profile.json, ops.csv, steps.csv, report.html
"""
from . import _kiln

# MindSpore's keyword arguments that choose what an Ascend or GPU device records; a CPU profile
# records everything it has, so they are accepted and change nothing.
_ARGS_WITHOUT_EFFECT = {"profile_communication", "aicore_metrics", "l2_cache", "data_process",
                        "parallel_strategy", "sync_enable", "timeline_limit", "op_time",
                        "data_simplification", "hbm_ddr", "pcie", "with_stack", "profiler_level",
                        "profile_framework"}


class Profiler:
    """Starts collecting when made (unless start_profile=False: then call start()); analyse()
    stops and writes the run folder. One profiler collects at a time."""

    def __init__(self, output_path="./profiler_data", profile_memory=True, start_profile=True,
                 **kwargs):
        unknown = set(kwargs) - _ARGS_WITHOUT_EFFECT
        if unknown:
            known = {"output_path", "profile_memory", "start_profile"} | _ARGS_WITHOUT_EFFECT
            raise TypeError(f"Profiler: unknown argument(s) {sorted(unknown)}; Kiln knows "
                            f"{sorted(known)}")
        self._native = _kiln.Profiler(str(output_path), bool(profile_memory), bool(start_profile))

    def start(self):
        self._native.start()

    def stop(self):
        self._native.stop()

    def analyse(self):
        """Stops collecting, writes the files and the HTML report; returns the report's path."""
        return self._native.analyse()

    def annotate(self, key, value):
        """A setting of the run, shown at the top of the report."""
        self._native.annotate(str(key), str(value))

    @property
    def output_path(self):
        """The run folder (<output_path>/rank<N> under data parallelism)."""
        return self._native.output_path
