"""NumPy/SciPy engines (imported eagerly: NumPy is a hard dependency)."""
