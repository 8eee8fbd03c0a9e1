"""Fuzzing campaign against a running servo-node (issue 10); the long variant is bench/fuzz.py."""
