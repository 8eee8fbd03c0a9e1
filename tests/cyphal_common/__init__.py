"""Tests of ``cyphal_common``: the plumbing both applications share."""
