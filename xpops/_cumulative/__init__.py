"""logcumsumexp: the contract in ``_logcumsumexp``, its engines beside it and its backward rule
in ``_vjp``."""

from ._logcumsumexp import logcumsumexp

__all__ = ["logcumsumexp"]
