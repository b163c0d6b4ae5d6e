"""Checkpoints in the safetensors layout: save_checkpoint, load_checkpoint, load_param_into_net."""
import os

from .._kiln import train as _native


def save_checkpoint(save_obj, ckpt_file_name, append_dict=None):
    """Writes a Cell's parameters and buffers (or a dict / list of named tensors) atomically."""
    metadata = {str(k): str(v) for k, v in (append_dict or {}).items()}
    _native.save_checkpoint(save_obj, os.fspath(ckpt_file_name), metadata)


def load_checkpoint(ckpt_file_name, net=None, strict_load=False):
    """A dict of name -> Tensor; with ``net``, also loads the values into it."""
    parameters = _native.load_checkpoint(os.fspath(ckpt_file_name))
    if net is not None:
        load_param_into_net(net, parameters, strict_load=strict_load)
    return parameters


def load_param_into_net(net, parameter_dict, strict_load=False):
    """Copies values into the net's parameters in place; returns the names the dict lacked."""
    return _native.load_param_into_net(net, parameter_dict, strict_load)
