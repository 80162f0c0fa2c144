"""Cleaning steps: one module per step, each a pure core plus a thin Beam wrapper."""
