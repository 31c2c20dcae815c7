"""``cgx.HyperOptimizer``: the einsum crate's hyper-optimizing path search, as an opt_einsum
path optimizer.

Use it as ``optimize=`` in :func:`cgx.contract`, :func:`cgx.contract_path` and
:func:`cgx.contract_expression` (``optimize="hyper"`` is one with the default budget), or
call it as opt_einsum calls a ``PathOptimizer``. The search itself runs in Rust without the
GIL: randomized greedy, recursive-partitioning (METIS) and simulated-annealing trials whose
parameters are tuned as the search goes, subtree reconfiguration of every tree, trials in
parallel on every core, within ``max_time`` seconds and ``max_repeats`` trials. Ctrl-C ends it with the best
path found so far. After a search, :attr:`HyperOptimizer.report` says what it did.

>>> import cgx
>>> opt = cgx.HyperOptimizer(max_time=None, max_repeats=8, seed=1)
>>> ring = ",".join(cgx.get_symbol(i) + cgx.get_symbol((i + 1) % 14) for i in range(14)) + "->"
>>> path, info = cgx.contract_path(ring, *[(2, 2)] * 14, shapes=True, optimize=opt)
>>> len(path), opt.report["trials"]
(13, 8)
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Collection, Mapping, Optional, Sequence

from . import _core

__all__ = ["HyperOptimizer"]

class HyperOptimizer:
    """The hyper-optimizer (cotengra's ``HyperOptimizer`` arguments where they mean the same).

    - ``max_time``: seconds after which no trial starts (default 1; ``None`` for none).
    - ``max_repeats``: the most trials (default: as many as ``max_time`` allows).
    - ``minimize``: ``'flops'``, ``'size'`` (the largest intermediate), ``'write'`` (elements
      written) or ``'combo'``/``'combo-F'`` (flops plus F times the elements written).
    - ``seed``: the random stream; with ``max_repeats`` and no ``max_time`` a search is
      reproducible.
    - ``reconf_size``: the frontier of subtree reconfiguration (3 to 12; 0 for none).
    - ``progbar``: print the search's progress on stderr.
    - ``cache_dir``: a directory where found paths are kept, keyed by the network's structure
      (equation and sizes, labels renamed canonically) and the objective; a later search of
      the same network takes the path from there and searches nothing
      (``report["cached"]``).
    - ``slicing_opts``: ``{"target_size": N}`` slices the best trees until no intermediate of
      one slice has more than N elements, reconfiguring after each sliced label; the labels
      are :attr:`sliced_inds`, and :func:`cgx.contract`, :func:`cgx.contract_path` and
      :func:`cgx.contract_expression` slice on them when given no ``sliced_inds`` of their
      own. The objective then scores every slice together.
    """

    def __init__(
        self,
        max_time: Optional[float] = 1.0,
        max_repeats: Optional[int] = None,
        minimize: str = "flops",
        seed: int = 0,
        reconf_size: int = 8,
        progbar: bool = False,
        slicing_opts: Optional[Mapping[str, Any]] = None,
        cache_dir: Optional[str] = None,
    ) -> None:
        target = None
        if slicing_opts is not None:
            unknown = set(slicing_opts) - {"target_size"}
            if unknown:
                raise ValueError(f"slicing_opts: {sorted(unknown)} not supported; only 'target_size' is")
            target = int(slicing_opts["target_size"])
        if not isinstance(minimize, str):
            raise ValueError(f"minimize={minimize!r}: expected 'flops', 'size', 'write' or 'combo-F'")
        # The crate checks the rest, as it will when searching (one check for every entry
        # point): a ValueError naming what is wrong.
        try:
            _core.check_hyper_options(max_time, max_repeats, minimize, int(reconf_size), target)
        except OverflowError:
            raise ValueError(
                f"max_repeats={max_repeats!r}, reconf_size={reconf_size!r}, target_size={target!r}: "
                "expected non-negative integers of at most 64 bits (max_repeats: 32)"
            ) from None
        self.target_size: Optional[int] = target
        self.max_time = None if max_time is None else float(max_time)
        self.max_repeats = None if max_repeats is None else int(max_repeats)
        self.minimize = minimize
        self.seed = int(seed)
        self.reconf_size = int(reconf_size)
        self.progbar = bool(progbar)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        #: What the last search did: ``trials``, ``seconds``, ``multiply_adds``,
        #: ``largest_intermediate``, ``written``, ``method``, ``interrupted``, ``sliced``,
        #: ``slices`` and ``cached`` (a path taken from ``cache_dir`` reports only
        #: ``trials`` (0), ``cached`` and ``sliced``).
        self.report: dict[str, Any] = {}
        #: The last path found.
        self.path: list[tuple[int, int]] = []
        #: The labels the last search sliced (with ``slicing_opts``), in the order chosen.
        self.sliced_inds: tuple[str, ...] = ()

    def __call__(
        self,
        inputs: Sequence[Collection[str]],
        output: Collection[str],
        size_dict: Mapping[str, int],
        memory_limit: Optional[int] = None,
    ) -> list[tuple[int, int]]:
        """A pairwise path for the network (opt_einsum's ``PathOptimizer`` protocol).

        ``memory_limit`` is not a constraint of the search: cgx bounds intermediates by
        slicing after the path is chosen.
        """
        numbers: dict[str, int] = {}
        # Labels sorted within each operand: sets iterate in an order that changes between
        # processes, and the numbering must not.
        ins = [[numbers.setdefault(c, len(numbers)) for c in sorted(t)] for t in inputs]
        out = [numbers.setdefault(c, len(numbers)) for c in sorted(output)]
        sizes = [0] * len(numbers)
        for c, i in numbers.items():
            sizes[i] = int(size_dict[c])
        progress: Optional[Callable[[int, float, float], None]] = _show if self.progbar else None
        path, report = _core.hyper_search(
            ins,
            out,
            sizes,
            self.max_time,
            self.max_repeats,
            self.minimize,
            self.seed,
            self.reconf_size,
            self.target_size,
            progress,
            self.cache_dir,
        )
        names = {i: c for c, i in numbers.items()}
        self.sliced_inds = tuple(names[i] for i in report["sliced"])
        if self.progbar:
            sys.stderr.write("\n")
        self.path, self.report = [(p[0], p[1]) for p in path], report
        return list(self.path)

    @property
    def trials(self) -> int:
        """Trials the last search ran (0 before any, and for networks solved exactly)."""
        return int(self.report.get("trials", 0))

    def __repr__(self) -> str:
        return f"HyperOptimizer(max_time={self.max_time!r}, max_repeats={self.max_repeats!r}, minimize={self.minimize!r}, seed={self.seed!r})"


def _show(trials: int, seconds: float, best: float) -> None:
    sys.stderr.write(f"\rhyper: {trials} trials, {seconds:.1f} s, best {best:.3e} multiply-adds")
    sys.stderr.flush()
