"""Hostile and malformed input against real processes (issue 10)."""
