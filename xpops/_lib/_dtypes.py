"""Dtype helpers shared by the public functions (namespace-agnostic)."""

from ._typing import Array, DType, Namespace

__all__ = ["default_float", "is_dtype", "is_low_precision"]


def is_dtype(xp: Namespace, dtype: DType, kind: str | tuple[str, ...]) -> bool:
    """``xp.isdtype``, False (not an error) for things that are not dtypes of `xp`."""
    try:
        return bool(xp.isdtype(dtype, kind))
    except (TypeError, ValueError, AttributeError):  # AttributeError: PyTorch given a str
        return False


def is_low_precision(xp: Namespace, dtype: DType) -> bool:
    """float16 and bfloat16, which xpops computes in float32."""
    names = ("float16", "bfloat16")
    return any(hasattr(xp, n) and dtype == getattr(xp, n) for n in names)


def default_float(xp: Namespace, x: Array) -> DType:
    """The namespace's default real floating dtype on the device of `x`."""
    try:
        return xp.__array_namespace_info__().default_dtypes(device=x.device)["real floating"]
    except (AttributeError, TypeError):
        return xp.float64
