"""Simulated servo joints with Webots Servo semantics."""
