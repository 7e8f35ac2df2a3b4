"""Dask engines: lazy, chunk-wise versions of the ops whose chunks run the in-memory xpops.

Imported only when a Dask array (or ``xp=dask.array``) reaches an op; xpops itself never
imports Dask.
"""
