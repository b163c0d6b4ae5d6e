"""Kiln record files with MindSpore's mindrecord names: FileWriter writes them, MindDataset
(kiln.dataset) reads them. `kiln.mindrecord` re-exports this module."""

from .engine import _native

FileWriter = _native.FileWriter

__all__ = ["FileWriter"]
