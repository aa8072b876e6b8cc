"""Shared test data (no tests here)."""

PRICES = [1.0, 2.0, 3.0]
