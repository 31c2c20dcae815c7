"""Hypothesis strategies shared by the tests: random einsum expressions with shapes and
operands, and helpers."""

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


def arrays(rng, shapes, complex_=False):
    """Random operands of ``shapes``, float64 or complex128."""
    out = []
    for s in shapes:
        a = rng.standard_normal(s)
        if complex_:
            a = a + 1j * rng.standard_normal(s)
        out.append(np.asarray(a))
    return out


def split(eq):
    """(input terms, output term) of an explicit expression."""
    lhs, out = eq.split("->")
    return lhs.split(","), out
