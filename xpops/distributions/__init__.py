"""Probability distributions: the multivariate normal, batched, with a CDF."""

from ._mvn import MultivariateNormal, kl_divergence

__all__ = ["MultivariateNormal", "kl_divergence"]
