"""Probability distributions: the multivariate normal, batched, with a CDF."""

from ._cdf import IntegrationWarning
from ._kl import kl_divergence
from ._mvn import MultivariateNormal

__all__ = ["IntegrationWarning", "MultivariateNormal", "kl_divergence"]
