"""Make the project's compiled DSDL importable before any test module imports pycyphal.application."""

from servo_node import _dsdl

_dsdl.ensure_compiled()
