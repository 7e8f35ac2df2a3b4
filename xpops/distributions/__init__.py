"""Probability distributions: the multivariate normal, batched, with a CDF."""

from ._kl import kl_divergence
from ._mvn import MultivariateNormal

__all__ = ["MultivariateNormal", "kl_divergence"]
