"""The job's ranks (``mindspore.communication``): init(), get_rank(), get_group_size().

Alone, a job of one; under ``mpirun`` (or ``kiln launch``), one rank per process.
"""
from .management import get_group_size, get_local_rank_size, get_rank, init
