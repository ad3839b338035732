"""Verified building blocks for the transformer-notebooks course."""

from helpers.device import get_device, set_seed

__all__ = ["get_device", "set_seed"]
