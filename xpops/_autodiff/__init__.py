"""Gradients: `xpops.vjp` (``_vjp``), the rule type (``_rule``), the PyTorch binding
(``_torch``) and the JAX binding (``_jax``). Each op's rule lives in its own package, in
``_vjp.py``."""
