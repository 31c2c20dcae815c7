"""Sliced contractions and their gradients over MPI (``mpi4py``): the API of
:mod:`cgx.distributed.mpi` (see there), under the name it has always had.

>>> from mpi4py import MPI                                         # doctest: +SKIP
>>> out = cgx.mpi.contract("ij,jk->ik", a, b, sliced_inds="j")    # doctest: +SKIP
"""

from .distributed.mpi import contract, hvp, value_and_grad

__all__ = ["contract", "value_and_grad", "hvp"]
