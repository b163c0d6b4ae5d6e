"""Kiln: a deep-learning training engine for CPUs, with MindSpore's Python names.

A MindSpore script runs with its imports changed from ``mindspore`` to ``kiln`` and
``device_target="CPU"``.
"""
from . import _kiln

__version__ = "0.1.0"
