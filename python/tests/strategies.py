"""Hypothesis strategies shared by the tests: random einsum expressions with shapes and
operands, and helpers."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

LABELS = "abcdef"


@st.composite
def expressions(draw, max_operands=4, max_rank=3, max_size=3, min_size=1, repeats=True, explicit=None):
    """``(eq, shapes)``: 1 to ``max_operands`` operands over a few labels, repeated labels in
    an operand (diagonals, traces) when ``repeats``, an explicit output (unique labels in any
    order) or numpy's implicit one."""
    n = draw(st.integers(1, max_operands))
    pool = LABELS[: draw(st.integers(1, len(LABELS)))]
    sizes = {c: draw(st.integers(min_size, max_size)) for c in pool}
    terms = []
    for _ in range(n):
        rank = draw(st.integers(0, max_rank))
        if repeats:
            term = draw(st.lists(st.sampled_from(pool), min_size=rank, max_size=rank))
        else:
            term = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=min(rank, len(pool)), unique=True))
        terms.append("".join(term))
    used = sorted(set("".join(terms)))
    if explicit is None:
        explicit = draw(st.booleans())
    if explicit:
        out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
        eq = ",".join(terms) + "->" + out
    else:
        eq = ",".join(terms)
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    return eq, shapes


def arrays(rng: np.random.Generator, shapes: Sequence[Sequence[int]], complex_: bool = False) -> list[np.ndarray]:
    """Random operands of ``shapes``, float64 or complex128."""
    out = []
    for s in shapes:
        a = rng.standard_normal(s)
        if complex_:
            a = a + 1j * rng.standard_normal(s)
        out.append(np.asarray(a))
    return out


def split(eq: str) -> tuple[list[str], str]:
    """(input terms, output term) of an explicit expression."""
    lhs, out = eq.split("->")
    return lhs.split(","), out


@st.composite
def numpy_expressions(draw, max_operands=4):
    """``(eq, shapes, path)``: numpy's einsum syntax in full: an ellipsis (``...``) anywhere
    in some operands, standing for 0 to 2 axes aligned from the right, axes of size 1 that
    broadcast (of labels and of ellipses), repeated labels (diagonals, traces), an implicit
    or explicit output (with the ellipsis anywhere, or left out: summed), and an explicit
    path whose steps contract 1 to 3 operands."""
    n = draw(st.integers(1, max_operands))
    pool = LABELS[: draw(st.integers(1, 5))]
    sizes = {c: draw(st.integers(1, 3)) for c in pool}
    ell = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    terms, shapes, has_ell = [], [], False
    for _ in range(n):
        term = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=3))
        ones = draw(st.sets(st.sampled_from(pool + "01")))  # broadcast: these labels and ellipsis axes are 1
        shape = [1 if c in ones else sizes[c] for c in term]
        text = "".join(term)
        if draw(st.booleans()):
            has_ell = True
            rank = draw(st.integers(0, len(ell)))
            at = draw(st.integers(0, len(term)))
            dims = [1 if str(d) in ones else ell[d] for d in range(len(ell) - rank, len(ell))]
            text = text[:at] + "..." + text[at:]
            shape = shape[:at] + dims + shape[at:]
        terms.append(text)
        shapes.append(tuple(shape))
    eq = ",".join(terms)
    if draw(st.booleans()):
        used = sorted(set("".join(terms).replace(".", "")))
        out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        if has_ell and draw(st.booleans()):
            out.insert(draw(st.integers(0, len(out))), "...")
        eq += "->" + "".join(out)
    path, live = [], n
    while live > 1:
        k = draw(st.integers(1, min(3, live)))
        step = tuple(draw(st.permutations(range(live)))[:k])
        path.append(step)
        live -= k - 1
    return eq, shapes, path


@dataclass(frozen=True)
class SlicedNetwork:
    """A random network (:func:`expressions`, explicit output, sizes 2 and 3) with some of
    its labels sliced, its operands' seed and dtype, and how many tasks to cut its slices
    into: the case the distributed executors are tested on."""

    eq: str
    shapes: list[tuple[int, ...]]
    sliced: list[str]
    complex_: bool
    seed: int
    n_tasks: int

    def operands(self) -> tuple[np.random.Generator, list[np.ndarray]]:
        """The seeded generator and the operands drawn from it (draw more from it)."""
        rng = np.random.default_rng(self.seed)
        return rng, arrays(rng, self.shapes, self.complex_)


@st.composite
def sliced_networks(draw, max_operands=3):
    """A :class:`SlicedNetwork`: any subset of the labels sliced, 1 to 5 tasks."""
    eq, shapes = draw(expressions(explicit=True, max_operands=max_operands, min_size=2))
    labels = sorted(set("".join(split(eq)[0])))
    pick = draw(st.lists(st.booleans(), min_size=len(labels), max_size=len(labels)))
    return SlicedNetwork(
        eq=eq,
        shapes=shapes,
        sliced=[c for c, p in zip(labels, pick) if p],
        complex_=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)),
        n_tasks=draw(st.integers(1, 5)),
    )
