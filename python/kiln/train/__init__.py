"""Model, callbacks and checkpoints (``mindspore.train``)."""
from .model import Model
from .serialization import load_checkpoint, load_param_into_net, save_checkpoint
from . import callback
