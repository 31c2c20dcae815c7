"""Sliced contractions, their gradients and Hessian-vector products spread over many
processes: the Dask API (:func:`contract`, :func:`value_and_grad`, :func:`hvp` and their
``submit_*`` forms, from :mod:`cgx.distributed.dask`), beside the same on Ray
(:mod:`cgx.ray`) and over MPI (:mod:`cgx.mpi`).

The package is split by concern, as each engine does the same work in its own way:

- an engine-neutral core: :mod:`~cgx.distributed.plan` (on the driver: the expression,
  its plan as the value that travels, the slice ranges, the checks),
  :mod:`~cgx.distributed.ranges` (on a worker: one slice range's work),
  :mod:`~cgx.distributed.blocks` (output blocks, where a sliced label is in the output)
  and :mod:`~cgx.distributed.combine` (two ranges' results as one);
- one module per engine over it: :mod:`~cgx.distributed.dask`,
  :mod:`~cgx.distributed.ray` and :mod:`~cgx.distributed.mpi`, each using the core's
  public names only, none another engine's.

Partitioned scalar DAGs (the benchmark shapes, cut into node blocks that each worker
generates and prepares alone) follow the same split: :mod:`~cgx.distributed.dag` is the
core (a partition's recipe, its preparation and evaluation on a worker, the
single-process run), and :func:`evaluate_dag` / :func:`submit_dag` schedule it on Dask.

Importing this package needs no engine: each engine's functions say what to install
when it is missing.
"""

from . import dag
from .blocks import Blocks
from .dask import (
    RUNS,
    Assembly,
    DagRun,
    contract,
    evaluate_dag,
    hvp,
    submit_contract,
    submit_dag,
    submit_hvp,
    submit_value_and_grad,
    value_and_grad,
)
from .plan import BLOCK_SHARE, HVP_WORK, MIN_TASK_FLOPS, TASKS_PER_THREAD, plan_ranges

__all__ = [
    "contract",
    "value_and_grad",
    "hvp",
    "submit_contract",
    "submit_value_and_grad",
    "submit_hvp",
    "plan_ranges",
    "Assembly",
    "Blocks",
    "MIN_TASK_FLOPS",
    "TASKS_PER_THREAD",
    "BLOCK_SHARE",
    "HVP_WORK",
    "RUNS",
    "dag",
    "DagRun",
    "evaluate_dag",
    "submit_dag",
]
