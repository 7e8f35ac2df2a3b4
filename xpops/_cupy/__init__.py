"""CuPy engines: kernel sources, memoized builders and launchers. Imported only on demand."""
