"""The exception root shared by both applications (``servo_node``, ``sim_plant_node``) and their plumbing.

``servo_node.errors`` holds the servo's error codes (values, not exceptions).
"""

from __future__ import annotations


class ServoError(RuntimeError):
    """Root of every exception this project raises on purpose."""


class ConfigurationError(ServoError, ValueError):
    """A register, a register file or a command-line value is unusable; the message names it."""
