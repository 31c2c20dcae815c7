"""Partitioned scalar DAGs, the engine-neutral core: a DAG of one of the benchmark shapes,
drawn by a counter-based generator (``workloads::counter``: any node block is generated
alone), cut into node blocks that are each generated, built, materialized and compiled
on their own (``workloads::partition``; ``docs/SCALING.md``, *What is built*).

- :class:`Partition` is a partition's *recipe*: shape, node count, seed, number of
  partitions and index. It pickles as that recipe alone, so it travels to any worker
  and :meth:`Partition.prepared` rebuilds the prepared partition there (kept in a small
  per-process cache): a partition moved to another worker, or lost with one, costs its
  preparation again, never the answer.
- :func:`prepare` (on a worker) prepares one and returns what the driver and the other
  partitions need to know of it (:class:`PartitionInfo`: its exports, the partitions it
  reads, its times);
- :func:`evaluate` (on a worker) runs one partition on a batch of input rows, given the
  infos and results of the partitions it reads: its boundary values are picked from their
  exports by global value (``dag_gather``) and bound as inputs by key;
- :func:`evaluate_local` runs every partition in order in this process: with one
  partition, the single-process result the distributed run must equal bit for bit.

The Dask scheduling is :func:`cgx.distributed.dask.evaluate_dag`.

>>> import numpy as np
>>> from cgx.distributed import dag
>>> x = dag.inputs("window", 10_000, rows=2)
>>> whole = dag.evaluate_local("window", 10_000, x)
>>> cut = dag.evaluate_local("window", 10_000, x, parts=3)
>>> bool(np.array_equal(whole.view(np.uint64), cut.view(np.uint64)))
True
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _core

__all__ = [
    "SHAPES",
    "SPEC_SEED",
    "CACHE_NODES",
    "Partition",
    "PartitionInfo",
    "most_parts",
    "partitions",
    "inputs",
    "prepare",
    "evaluate",
    "evaluate_local",
    "forget",
]

#: The benchmark shapes (``docs/SPEC.md`` section 8.1).
SHAPES = ("window", "uniform", "chain", "layered_wide", "layered_deep")
#: The seed of the generated DAGs, as the benchmarks' (``workloads::SPEC_SEED``).
SPEC_SEED = 1
#: A process keeps prepared partitions of at most this many nodes in all; the least
#: recently used go first (at the estimate of 256 bytes per node, about 5 GB; prepared
#: programs take less than half of that).
CACHE_NODES = 20_000_000

_CACHE: collections.OrderedDict[tuple[str, int, int, int, int], Any] = collections.OrderedDict()
_LOCK = threading.Lock()


class Partition:
    """Partition ``index`` of ``parts`` of the DAG of ``shape`` with about ``nodes`` nodes
    drawn from ``seed``: a recipe, whose pickle is the recipe alone."""

    __slots__ = ("shape", "nodes", "seed", "parts", "index")

    def __init__(self, shape: str, nodes: int, seed: int, parts: int, index: int) -> None:
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r}: expected one of {', '.join(SHAPES)}")
        for name, v in (("nodes", nodes), ("seed", seed), ("parts", parts), ("index", index)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, not {v!r}")
        if not 0 <= index < parts:
            raise ValueError(f"partition {index} of {parts}: the index must be below {parts}")
        self.shape, self.nodes, self.seed, self.parts, self.index = shape, int(nodes), int(seed), int(parts), int(index)

    def recipe(self) -> tuple[str, int, int, int, int]:
        """``(shape, nodes, seed, parts, index)``."""
        return (self.shape, self.nodes, self.seed, self.parts, self.index)

    def __reduce__(self) -> tuple[Any, tuple[str, int, int, int, int]]:
        return (Partition, self.recipe())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Partition) and other.recipe() == self.recipe()

    def __hash__(self) -> int:
        return hash(self.recipe())

    def __repr__(self) -> str:
        return "Partition({!r}, {}, {}, {}, {})".format(*self.recipe())

    def prepared(self) -> Any:
        """The prepared partition (``cgx._core.DagPartition``) of this process: from the
        cache, or generated and prepared now (the GIL released) and cached."""
        key = self.recipe()
        with _LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return _CACHE[key]
        made = _core.DagPartition(*key)
        with _LOCK:
            _CACHE[key] = made
            _CACHE.move_to_end(key)
            total = sum(p.range[1] - p.range[0] for p in _CACHE.values())
            while total > CACHE_NODES and len(_CACHE) > 1:
                _, old = _CACHE.popitem(last=False)
                total -= old.range[1] - old.range[0]
        return made


def forget(recipes: list[tuple[str, int, int, int, int]] | None = None) -> int:
    """Drops prepared partitions from this process's cache (every one when ``recipes`` is
    ``None``); returns how many were dropped."""
    with _LOCK:
        keys = list(_CACHE) if recipes is None else [tuple(r) for r in recipes if tuple(r) in _CACHE]
        for k in keys:
            del _CACHE[k]  # type: ignore[arg-type]
    return len(keys)


@dataclass(frozen=True)
class PartitionInfo:
    """What is known of a prepared partition outside its process."""

    #: Its index.
    index: int
    #: Its nodes, ``(first, end)``.
    range: tuple[int, int]
    #: The earlier partitions whose exports it reads.
    sources: tuple[int, ...]
    #: Its values that later partitions read (global values, increasing).
    exports: NDArray[np.uint64]
    #: How many values it reads from earlier partitions.
    boundary: int
    #: How many DAG outputs it holds.
    held: int
    #: Operations of its program after CSE.
    operations: int
    #: Seconds its preparation took: ``(generate, build, materialize, compile)``, or
    #: zeros when it was found in the cache.
    times: tuple[float, float, float, float]
    #: The process that prepared it.
    pid: int


def most_parts(shape: str, nodes: int) -> int:
    """The most partitions the DAG can be cut into (its nodes; its layers when layered)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}: expected one of {', '.join(SHAPES)}")
    return int(_core.dag_size(shape, int(nodes))[2])


def partitions(shape: str, nodes: int, parts: int, seed: int = SPEC_SEED) -> list[Partition]:
    """The ``parts`` partitions of the DAG, checked: a bad shape, size or count raises here,
    before anything is sent anywhere."""
    most = most_parts(shape, nodes)
    if not isinstance(parts, (int, np.integer)) or isinstance(parts, bool) or not 1 <= parts <= most:
        raise ValueError(f"parts must be 1 to {most} for this DAG, not {parts!r}")
    return [Partition(shape, nodes, seed, int(parts), k) for k in range(int(parts))]


def inputs(shape: str, nodes: int, rows: int = 1, seed: int = 7) -> NDArray[np.float64]:
    """``rows`` rows of seeded input values of the DAG (values in ``[0.5, 1.5)``)."""
    return _core.dag_inputs(shape, int(nodes), int(seed), int(rows))


def check_batch(shape: str, nodes: int, batch: Any) -> NDArray[np.float64]:
    """A batch as a C-contiguous float64 array of one row per evaluation and one column per
    DAG input (a 1-d array is one row)."""
    n_inputs, _, _ = _core.dag_size(shape, int(nodes))
    x = np.ascontiguousarray(batch, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != n_inputs:
        raise ValueError(f"a batch of inputs has shape {np.shape(batch)}; the DAG reads {n_inputs} inputs per row")
    return x


def prepare(part: Partition) -> PartitionInfo:
    """Prepares ``part`` in this process (or finds it prepared) and describes it."""
    key = part.recipe()
    with _LOCK:
        cached = key in _CACHE
    p = part.prepared()
    times = (0.0, 0.0, 0.0, 0.0) if cached else tuple(p.times)
    return PartitionInfo(
        index=p.index,
        range=tuple(p.range),
        sources=tuple(p.sources),
        exports=p.exports,
        boundary=len(p.boundary),
        held=len(p.held),
        operations=p.operations,
        times=times,
        pid=os.getpid(),
    )


def evaluate(
    part: Partition, batch: NDArray[np.float64], *sources: Any
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Runs ``part`` on ``batch`` (rows of DAG inputs) in this process. ``sources`` is, for
    each partition it reads (:attr:`PartitionInfo.sources`, in order), that partition's
    :class:`PartitionInfo`, then its result on the same batch. Returns ``(exports, held)``:
    the rows of its exports (for later partitions) and of the DAG outputs it holds."""
    p = part.prepared()
    rows = batch.shape[0]
    pairs = [(sources[i].exports, sources[i + 1][0]) for i in range(0, len(sources), 2)]
    if [info.index for info, _ in zip(sources[::2], pairs)] != list(p.sources):
        raise ValueError(f"partition {part.index} reads partitions {list(p.sources)}; given others")
    boundary = _core.dag_gather(p.boundary, pairs, rows)
    exports, held = p.evaluate(batch, boundary)
    return exports, held


def evaluate_local(
    shape: str, nodes: int, batch: Any, parts: int = 1, seed: int = SPEC_SEED
) -> NDArray[np.float64]:
    """The DAG's outputs on ``batch`` (one row of outputs per row of inputs), every
    partition prepared and run in order in this process and dropped afterwards. With one
    partition this is the single-process result."""
    x = check_batch(shape, nodes, batch)
    infos: list[PartitionInfo] = []
    results: list[tuple[NDArray[np.float64], NDArray[np.float64]]] = []
    try:
        for part in partitions(shape, nodes, parts, seed):
            info = prepare(part)
            args: list[Any] = []
            for s in info.sources:
                args += [infos[s], results[s]]
            results.append(evaluate(part, x, *args))
            infos.append(info)
    finally:
        forget([p.recipe() for p in partitions(shape, nodes, parts, seed)])
    return np.concatenate([held for _, held in results], axis=1)
