"""``optimize`` as the engine's path (:func:`find_path`), and the report of a path
(:class:`PathInfo`).

``optimize`` is the name of one of the einsum crate's finders (passed on as a name: the
crate's ``PathChoice`` parser, the one parser of finder names, reads it when the
expression is planned), ``False`` (left to right), an explicit path in opt_einsum's
format (steps of any length, made pairwise here), an object with opt_einsum's
``PathOptimizer`` call signature (called with the network as opt_einsum calls it), or the
name of another opt_einsum path finder when opt_einsum is installed.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Union, cast

from . import _core
from ._parser import U64, float_prod, is_sequence


def _position(p: Any, s: int, step: Any) -> int:
    """Path entry ``p`` (of step ``s``) as an int: integers only (numpy's too), not bools."""
    if isinstance(p, bool) or not isinstance(p, numbers.Integral):
        raise ValueError(
            f"invalid contraction path: step {s} {_shown(step)} is not a tuple of positions: {_shown(p)} is not an integer"
        )
    return int(p)


def _shown(x: Any) -> str:
    """``repr(x)``, of numpy arrays and numbers as of lists and Python numbers."""
    return repr(x.tolist()) if hasattr(x, "tolist") else repr(x)


def _path_steps(path: Any) -> list[tuple[int, ...]]:
    """An explicit path (any sequence of sequences of integers, numpy arrays included, or
    numpy's ``['einsum_path', (0, 1), ...]``) as a list of tuples of ints."""
    if not is_sequence(path):
        raise TypeError(
            "optimize must be a path finder's name, a bool, a path (a sequence of tuples of positions) "
            f"or a PathOptimizer, not {type(path).__name__} {path!r}"
        )
    path = list(path)
    if path and isinstance(path[0], str) and path[0] == "einsum_path":  # numpy.einsum_path's format
        path = path[1:]
    steps = []
    for s, step in enumerate(path):
        if not is_sequence(step):
            raise ValueError(f"invalid contraction path: step {s} {_shown(step)} is not a tuple of positions")
        steps.append(tuple(_position(p, s, step) for p in step))
    return steps


def pairwise(path: Any, n: int) -> list[tuple[int, int]]:
    """An opt_einsum path (tuples of any length) as the engine's pairwise path."""
    steps = _path_steps(path)
    if all(len(s) == 2 for s in steps):
        for s, step in enumerate(steps):
            for p in step:
                if not 0 <= p < U64:
                    raise ValueError(f"invalid contraction path at step {s}: position {p} is out of range")
        return cast("list[tuple[int, int]]", steps)
    # Follow opt_einsum's operand list and the engine's side by side: operands are named
    # by ids; a step removes its operands from opt_einsum's list and appends the result.
    theirs = list(range(n))
    ours = list(range(n))
    fresh = n
    pairs: list[tuple[int, int]] = []
    for s, step in enumerate(steps):
        if len(step) == 0 or len(set(step)) != len(step) or any(not 0 <= p < len(theirs) for p in step):
            raise ValueError(
                f"invalid contraction path at step {s}: {step} is empty, repeats a position "
                f"or is out of range ({len(theirs)} operands remain)"
            )
        ids = [theirs[p] for p in step]
        for p in sorted(step, reverse=True):
            del theirs[p]
        current = ids[0]
        for other in ids[1:]:
            i, j = ours.index(current), ours.index(other)
            pairs.append((i, j))
            for p in sorted((i, j), reverse=True):
                del ours[p]
            ours.append(fresh)
            current = fresh
            fresh += 1
        theirs.append(current)
    return pairs


class UnknownOptimizerError(KeyError, ValueError):
    """An ``optimize`` name that no path finder has. A ``KeyError``, as
    ``opt_einsum.paths.get_path_fn`` raises, and a ``ValueError``, as cgx raised before
    (and raises for every other bad argument), so either ``except`` catches it."""

    def __str__(self) -> str:
        # KeyError's `str` is the repr of its argument, quotes included; this is a sentence.
        return str(self.args[0]) if self.args else ""


def check_finder_name(name: str) -> None:
    """``UnknownOptimizerError`` unless ``name`` names one of the engine's finders or, with
    opt_einsum installed, one of its."""
    if not _core.is_path_finder(name):
        _opt_einsum_finder(name)


def _opt_einsum_finder(name: str) -> Callable[..., Any]:
    """opt_einsum's path finder ``name``, or ``UnknownOptimizerError``."""
    try:
        from opt_einsum.paths import get_path_fn
    except ImportError:
        raise UnknownOptimizerError(
            f"optimize={name!r}: the built-in finders are 'greedy', 'optimal', 'dp', 'random-greedy', 'auto' and 'hyper'; other path finders come from opt_einsum, which is not installed"
        ) from None
    try:
        return cast("Callable[..., Any]", get_path_fn(name))
    except KeyError as e:
        raise UnknownOptimizerError(f"optimize={name!r}: {e.args[0] if e.args else e}") from None


def find_path(eq: str, shapes: Sequence[Sequence[int]], optimize: Any, memory_limit: float | None) -> str | list[tuple[int, int]] | None:
    """``None`` for the engine's greedy finder, the name of another of its finders (the
    einsum crate's one parser of finder names reads it when the expression is planned,
    so that the expression is parsed once), else a pairwise path."""
    if optimize is None or optimize is True or (isinstance(optimize, str) and optimize == "greedy"):
        return None
    if isinstance(optimize, str) and _core.is_path_finder(optimize):
        return optimize
    if optimize is False:
        return [(0, 1)] * max(len(shapes) - 1, 0)
    if isinstance(optimize, str):
        optimize = _opt_einsum_finder(optimize)
    if callable(optimize):
        inputs, output, sizes, _ = _core.Expression(eq, [list(s) for s in shapes])._plan()
        path = optimize([frozenset(t) for t in inputs], frozenset(output), sizes, memory_limit)
        return pairwise(path, len(shapes))
    return pairwise(optimize, len(shapes))


def optimizer_slices(optimize: Any, sliced: list[str] | None) -> list[str] | None:
    """``sliced`` as given, else the labels a path optimizer chose to slice
    (``HyperOptimizer(slicing_opts=...)``'s ``sliced_inds``), else ``None``."""
    if sliced is None and getattr(optimize, "sliced_inds", None):
        return list(optimize.sliced_inds)
    return sliced


class PathInfo:
    """What a contraction along a path costs: opt_einsum's ``PathInfo``, printed as a report.

    Attributes: ``eq``, ``path`` (as the engine runs it: its first sums, one-operand
    steps, then the pairs), ``shapes``, ``size_dict``, ``input_subscripts``,
    ``output_subscript``, ``indices`` (every label), ``steps`` (per step: positions, the
    labels of both operands and of the result, its size in elements, its multiply-adds),
    ``contraction_list`` (opt_einsum's per-step tuples: positions in decreasing order,
    labels summed away, the step's equation, the labels of the operands left after it,
    and ``'GEMM'`` where the step is a plain matrix product, summing away labels both
    operands have and keeping none they share, else ``False``), ``size_list`` (the
    size of each step's result), ``opt_cost`` and ``naive_cost`` (flops along the path and
    of one loop over all labels, counted as opt_einsum counts them: per loop iteration,
    one per operand beyond the first, at least one, plus one for an inner product),
    ``speedup``, ``largest_intermediate`` (elements) and ``scale_list`` (labels per step);
    and the slicing: ``sliced_inds``, ``n_slices``, ``slicing_overhead`` (flops of all
    slices over the unsliced flops) and ``largest_per_slice`` (elements of the largest
    intermediate of one slice, what ``memory_limit`` bounds; ``largest_intermediate`` is
    the unsliced figure, as opt_einsum reports it).
    """

    def __init__(
        self,
        eq: str,
        shapes: Iterable[Sequence[int]],
        plan: _core.PlanTuple,
        path: Sequence[tuple[int, ...]],
        sliced_inds: Iterable[str] = (),
        n_slices: int = 1,
        slicing_overhead: float = 1.0,
    ) -> None:
        inputs, output, sizes, steps = plan
        self.eq = eq
        self.path = path
        self.shapes = [tuple(s) for s in shapes]
        self.size_dict = dict(sizes)
        self.input_subscripts = ",".join(inputs)
        self.output_subscript = output
        self.steps = steps
        self.indices = frozenset(self.size_dict)
        # In floats: a large network's loop over all labels overflows what a float holds
        # from an integer (it becomes inf, as in opt_einsum).
        # opt_einsum's naive loop adds once more when a label is shared by operands.
        shared = sum(len(set(t)) for t in inputs) > len(self.indices)
        self.naive_cost = _flops(self.size_dict, self.size_dict, shared, len(inputs))
        # Without steps, 1 as in opt_einsum (the default of its maximum over no sizes).
        self.largest_intermediate = max((s[2] for s in steps), default=1.0)
        self.size_list = [s[2] for s in steps]
        self.scale_list: list[int] = []
        self.contraction_list: list[tuple[tuple[int, ...], frozenset[str], str, tuple[str, ...], Union[str, bool]]] = []
        costs: list[float] = []
        remaining = list(inputs)
        for (i, j), (a, b, r), _, _ in steps:
            both, common = set(a) | set(b), set(a) & set(b)
            removed = frozenset(both - set(r))
            costs.append(_flops(both, self.size_dict, removed, 1 if i == j else 2))
            self.scale_list.append(len(both))
            for p in sorted({i, j}, reverse=True):
                del remaining[p]
            remaining.append(r)
            spec = f"{a}->{r}" if i == j else f"{a},{b}->{r}"
            # A matrix product: labels summed away, each in both operands, none repeated,
            # and no batch label (kept, in both).
            product = i != j and len(set(a)) == len(a) and len(set(b)) == len(b) and not common & set(r)
            blas = "GEMM" if removed and product and removed <= common else False
            self.contraction_list.append((tuple(sorted({i, j}, reverse=True)), removed, spec, tuple(remaining), blas))
        # Without steps (one operand, relabelled) the whole loop is the one step.
        self.opt_cost = sum(costs) if steps else self.naive_cost
        self.speedup = self.naive_cost / self.opt_cost if self.opt_cost else 1.0
        self.sliced_inds = list(sliced_inds)
        self.n_slices = n_slices
        self.slicing_overhead = slicing_overhead
        # A slice fixes each sliced label, so its steps' results lack those axes.
        kept = [[self.size_dict[c] for c in s[1][2] if c not in self.sliced_inds] for s in steps]
        self.largest_per_slice = max((float_prod(k) for k in kept), default=1.0)

    def plot(self, file: str | os.PathLike[str] | None = None) -> str:
        """Draws the contraction tree as SVG: each step a circle sized by its multiply-adds
        and colored by the size of its result, sliced labels as dashed edges. Writes it to
        ``file`` (a path) when given; returns the SVG text.

        >>> import cgx
        >>> _, info = cgx.contract_path("ij,jk,kl->il", (2, 3), (3, 4), (4, 5), shapes=True)
        >>> info.plot().count("<circle")
        2
        """
        svg = _core.tree_svg(self.eq, [list(s) for s in self.shapes], [list(p) for p in self.path], list(self.sliced_inds))
        if file is not None:
            with open(file, "w", encoding="utf-8") as f:
                f.write(svg)
        return svg

    def __str__(self) -> str:
        lines = [
            f"  Complete contraction:  {self.input_subscripts}->{self.output_subscript}",
            f"         Naive scaling:  {len(self.size_dict)}",
            f"     Optimized scaling:  {max(self.scale_list, default=0)}",
            f"      Naive FLOP count:  {self.naive_cost:.3e}",
            f"  Optimized FLOP count:  {self.opt_cost:.3e}",
            f"   Theoretical speedup:  {self.speedup:.3e}",
            f"  Largest intermediate:  {self.largest_intermediate:.3e} elements",
        ]
        if self.sliced_inds:
            lines.append(
                f"                Sliced:  {','.join(self.sliced_inds)} ({self.n_slices} slices, "
                f"overhead {self.slicing_overhead:.3f}, largest {self.largest_per_slice:.3e} per slice)"
            )
        lines += [
            "-" * 80,
            f"{'step':>4}  {'pair':<10}{'scaling':>8}{'flops':>12}{'size':>12}  contraction",
            "-" * 80,
        ]
        for n, ((i, j), (a, b, r), size, madds) in enumerate(self.steps):
            # A final one-operand step (reorder or reduce) has positions (0, 0).
            pair, term = (f"({i},)", f"{a}->{r}") if i == j else (f"({i}, {j})", f"{a},{b}->{r}")
            lines.append(f"{n:>4}  {pair:<10}{len(set(a) | set(b)):>8}{2 * madds:>12.3e}{size:>12.3e}  {term}")
        return "\n".join(lines)

    __repr__ = __str__


def _flops(labels: Iterable[str], sizes: Mapping[str, float], inner: Collection[str] | bool, terms: int) -> float:
    """opt_einsum's flop count of a loop over ``labels``: per iteration, one per operand
    beyond the first (at least one), plus one for an inner product (``inner``: labels
    summed away in a step; labels shared by operands in the naive loop)."""
    return float_prod(sizes[c] for c in labels) * (max(terms - 1, 1) + (1 if inner else 0))
