from .._kiln.communication import get_group_size, get_local_rank_size, get_rank, init  # noqa: F401
