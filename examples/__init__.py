"""Examples that put several servo nodes to work (each one a package runnable with ``python -m``)."""
