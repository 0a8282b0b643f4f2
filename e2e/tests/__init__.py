"""Tests against the real control plane (fixtures in e2e/conftest.py)."""
