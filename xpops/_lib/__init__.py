"""Shared internal helpers."""
