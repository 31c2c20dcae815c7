"""Sliced contractions and their gradients on Ray: the API of :mod:`cgx.distributed.ray`
(see there), under the name it has always had.

>>> import ray, cgx.ray                                    # doctest: +SKIP
>>> ray.init(num_cpus=2)                                   # doctest: +SKIP
>>> cgx.ray.contract("ij,jk->ik", a, b, sliced_inds="j")  # doctest: +SKIP
"""

from .distributed.ray import contract, hvp, submit_contract, submit_hvp, submit_value_and_grad, value_and_grad

__all__ = ["contract", "value_and_grad", "hvp", "submit_contract", "submit_value_and_grad", "submit_hvp"]
