"""Scaled contraction (``strip_exponent``): equal to the plain one where both are finite
(hypothesis, real and complex, sliced), equal to exact rational references where the plain
one overflows (an MPS inner product of 200 sites with entries in [0.5, 1), products of
10^300-scale numbers, the 200-site MPS instance with factored operands, value and
gradients), the 200-site MPS instance against numpy in long double, the
automatic rerun of a plain result that left the range, and gradients by finite
differences in log space."""

from typing import Any

import json
import math
import pathlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions

SETTINGS = settings(max_examples=60, deadline=None)
DATA = pathlib.Path(__file__).resolve().parents[2] / "crates" / "einsum" / "tests" / "data"


def log10_of(pair: tuple[Any, int]) -> float:
    """log10 |value| of a ``(mantissa, exponent)`` scalar pair."""
    m, e = pair
    return math.log10(abs(complex(m))) + e


def log10_fraction(x: Fraction) -> float:
    """log10 |x| of an exact rational of any size (Python's log10 takes big integers)."""
    return math.log10(abs(x.numerator)) - math.log10(x.denominator)


def value(pair):
    m, e = pair
    return m * 10.0**e


@SETTINGS
@given(case=expressions(explicit=True), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_scaled_equals_plain_where_both_are_finite(case, complex_, seed):
    eq, shapes = case
    ops = arrays(np.random.default_rng(seed), shapes, complex_)
    plain = cgx.contract(eq, *ops)
    m, e = cgx.contract(eq, *ops, strip_exponent=True)
    assert m.shape == plain.shape
    big = max(np.abs(m.real).max(), np.abs(m.imag).max()) if m.size else 0
    assert big == 0 or 0.5 <= big < 1
    np.testing.assert_allclose(value((m, e)), plain, rtol=1e-12, atol=1e-12 * (1 + np.abs(plain).max(initial=0)))
    # The default leaves a finite result alone.
    np.testing.assert_array_equal(cgx.contract(eq, *ops, strip_exponent=None), plain)
    expr = cgx.contract_expression(eq, *shapes)
    if plain.shape == ():
        (mv, ev), grads = expr.value_and_grad(*ops, strip_exponent=True)
        _, want = expr.value_and_grad(*ops)
        assert abs(value((mv, ev)) - plain) <= 1e-12 * (1 + abs(plain))
        for g, w in zip(grads, want):
            np.testing.assert_allclose(value(g), w, rtol=1e-10, atol=1e-12 * (1 + np.abs(w).max(initial=0)))


def test_sliced_scaled_equals_unsliced() -> None:
    rng = np.random.default_rng(3)
    a, b, c = rng.random((4, 5)) * 1e150, rng.random((5, 6)) * 1e150, rng.random((6, 4)) * 1e150
    assert np.isinf(cgx.contract("ij,jk,ki->", a, b, c, strip_exponent=False))
    assert isinstance(cgx.contract("ij,jk,ki->", a, b, c), tuple)
    whole = cgx.contract("ij,jk,ki->", a, b, c, strip_exponent=True)
    sliced = cgx.contract("ij,jk,ki->", a, b, c, sliced_inds="jk", strip_exponent=True)
    assert abs(log10_of(sliced) - log10_of(whole)) < 1e-12
    expr = cgx.contract_expression("ij,jk,ki->", a.shape, b.shape, c.shape, sliced_inds="j")
    value_, grads = expr.value_and_grad(a, b, c, strip_exponent=True)
    assert abs(log10_of(value_) - log10_of(whole)) < 1e-12
    # The gradient of a trilinear product dotted with its operand is the value (Euler).
    for g, x in zip(grads, (a, b, c)):
        gm, ge = g
        assert abs(math.log10(np.sum(gm * x)) + ge - log10_of(whole)) < 1e-12


def mps_inner_product(n, d, chi, rng):
    """A ``n``-site MPS inner product ``<bra|ket>`` in the interleaved form, with entries
    ``k/64`` (k in 32..63: in [0.5, 1), exact in binary) and, beside it, the operands as
    integers (64 times the entries)."""
    ints, args = [], []
    bond = lambda side, k: ("b" if side == 0 else "k", k)  # noqa: E731
    labels: dict[tuple[str, int], int] = {}

    def label(key):
        return labels.setdefault(key, len(labels))

    for side in (0, 1):
        for k in range(n):
            shape = [d] + ([chi] if k > 0 else []) + ([chi] if k < n - 1 else [])
            t = rng.integers(32, 64, size=shape)
            ls = [label(("s", k))] + ([label(bond(side, k - 1))] if k > 0 else []) + ([label(bond(side, k))] if k < n - 1 else [])
            ints.append(t)
            args += [t / 64.0, ls]
    return ints, args + [[]]


def exact_mps(ints, n):
    """The inner product in exact integers, site by site: an environment over the two bonds."""
    bra, ket = ints[:n], ints[n:]
    env = np.einsum("sa,sb->ab", bra[0].astype(object), ket[0].astype(object))
    for k in range(1, n - 1):
        env = np.einsum("ab,sac,sbd->cd", env, bra[k].astype(object), ket[k].astype(object), optimize=False)
    total = np.einsum("ab,sa,sb->", env, bra[n - 1].astype(object), ket[n - 1].astype(object), optimize=False)
    return Fraction(int(total), 64 ** (2 * n))


def test_an_mps_of_200_sites_matches_exact_integers() -> None:
    n = 200
    ints, args = mps_inner_product(n, 10, 3, np.random.default_rng(0))
    plain = cgx.contract(*args, strip_exponent=False)
    assert np.isinf(plain)
    exact = exact_mps(ints, n)
    assert log10_fraction(exact) > 308
    got = cgx.contract(*args, strip_exponent=True)
    assert abs(log10_of(got) - log10_fraction(exact)) < 1e-12 * log10_fraction(exact)
    # The default reruns scaled and gives the pair, since the value does not fit.
    auto = cgx.contract(*args)
    assert isinstance(auto, tuple) and abs(log10_of(auto) - log10_of(got)) < 1e-13 * log10_of(got)


def test_the_mps_200_instance_matches_long_double() -> None:
    inst = json.loads((DATA / "str_mps_varying_inner_product_200.json").read_text())
    eq, shapes = inst["format_string"], inst["shapes"]
    path = [tuple(p) for p in inst["paths"]["opt_size"]["path"]]
    rng = np.random.default_rng(5)
    ops = [0.5 + 0.5 * rng.random(s) for s in shapes]
    assert np.isinf(cgx.contract(eq, *ops, optimize=path, strip_exponent=False))
    got = cgx.contract(eq, *ops, optimize=path, strip_exponent=True)
    if np.finfo(np.longdouble).maxexp < 16384:
        pytest.skip("numpy's long double has no wider range here")
    # numpy along the same path in long double (range to 10^4932): another arithmetic.
    want = cgx.contract(eq, *[o.astype(np.longdouble) for o in ops], optimize=path)
    assert np.isfinite(want)
    assert abs(log10_of(got) - float(np.log10(want))) < 1e-11 * float(np.log10(want))


def test_products_of_1e300_numbers_match_fractions() -> None:
    x = np.array([3e300, -1e300, 2.5e300])
    y = np.array([1e300, 4e300, 1e300])
    exact = sum((Fraction(a) * Fraction(b) for a, b in zip(x, y)), Fraction(0))
    assert not np.isfinite(cgx.contract("i,i->", x, y, strip_exponent=False))
    got = cgx.contract("i,i->", x, y, strip_exponent=True)
    assert abs(log10_of(got) - log10_fraction(exact)) < 1e-14 * 600 and got[0] > 0
    # An intermediate of 10^600 and a result of 10^300 that fits: the default gives the
    # array, which the plain contraction cannot.
    a = np.full((2, 2), 1e300)
    c = np.full((2, 2), 1e-300)
    path = [(0, 1), (0, 1)]
    assert np.isinf(cgx.contract("ab,bc,cd->ad", a, a, c, optimize=path, strip_exponent=False)).all()
    auto = cgx.contract("ab,bc,cd->ad", a, a, c, optimize=path)
    want = Fraction(1e300) ** 2 * Fraction(1e-300) * 4
    assert isinstance(auto, np.ndarray) and np.all(np.abs(auto / float(want) - 1) < 1e-14)
    # A product that underflows: 10^-600, zero in plain arithmetic.
    tiny = np.array([1e-300, 2e-300])
    assert cgx.contract("i,i->", tiny, tiny, strip_exponent=False) == 0
    t = cgx.contract("i,i->", tiny, tiny, strip_exponent=True)
    assert abs(log10_of(t) - log10_fraction(Fraction(1e-300) ** 2 + Fraction(2e-300) ** 2)) < 1e-12 * 600


def log_f(expr, ops):
    """ln |f| of a scaled scalar contraction."""
    return log10_of(expr(*ops, strip_exponent=True)) * math.log(10)


def test_gradients_match_finite_differences_in_log_space() -> None:
    n = 200
    ints, args = mps_inner_product(n, 10, 3, np.random.default_rng(9))
    ops, labels = args[0:-1:2], args[1:-1:2]
    letters: dict[object, str] = {}
    eq = ",".join("".join(letters.setdefault(l, cgx.get_symbol(len(letters))) for l in ls) for ls in labels) + "->"
    expr = cgx.contract_expression(eq, *[o.shape for o in ops])
    value_, grads = expr.value_and_grad(*ops, strip_exponent=True)
    assert log10_of(value_) > 308
    rng = np.random.default_rng(1)
    for i in (0, 57, n - 1, n + 3, 2 * n - 1):
        v = rng.standard_normal(ops[i].shape)
        # d ln f along v = <grad_i, v> / f: scaled numbers divided, so finite.
        gm, ge = grads[i]
        m, e = value_
        want = float(np.sum(gm * v)) / float(m) * 10.0 ** (ge - e)
        h = 1e-4
        plus = [o + h * v if k == i else o for k, o in enumerate(ops)]
        minus = [o - h * v if k == i else o for k, o in enumerate(ops)]
        fd = (log_f(expr, plus) - log_f(expr, minus)) / (2 * h)
        assert abs(fd - want) < 1e-6 * (1 + abs(want)), (i, fd, want)


def test_value_and_grad_reruns_scaled_when_a_gradient_overflows() -> None:
    x = np.full(3, 1e200)
    expr = cgx.contract_expression("i,i,i->", (3,), (3,), (3,))
    plain_value, plain_grads = expr.value_and_grad(x, x, x, strip_exponent=False)
    assert np.isinf(plain_value) and np.isinf(plain_grads[0]).all()
    value_, grads = expr.value_and_grad(x, x, x)
    assert isinstance(value_, tuple) and all(isinstance(g, tuple) for g in grads)
    assert abs(log10_of(value_) - (600 + math.log10(3))) < 1e-12
    # 10^400 per entry: still a pair; with smaller operands the gradients fit as arrays.
    y = np.full(3, 1e-200)
    value_, grads = expr.value_and_grad(x, x, y)
    assert isinstance(value_, np.ndarray) and abs(value_ / 3e200 - 1) < 1e-14
    assert isinstance(grads[2], tuple) and isinstance(grads[0], np.ndarray)
    np.testing.assert_allclose(grads[0], np.full(3, 1.0), rtol=1e-14)


def test_bad_strip_exponent_arguments_are_errors() -> None:
    x = np.ones(2)
    with pytest.raises(TypeError, match="strip_exponent"):
        cgx.contract("i,i->", x, x, strip_exponent="yes")  # type: ignore[arg-type]  # the wrong type, on purpose
    with pytest.raises(TypeError, match="numpy"):
        cgx.contract("i,i->", x, x, strip_exponent=True, dtype=np.float64)
    expr = cgx.contract_expression("i,i->", (2,), (2,))
    with pytest.raises(TypeError, match="out="):
        expr(x, x, out=np.zeros(()), strip_exponent=True)
    with pytest.raises(ValueError, match="shape"):
        expr(x, np.ones(3), strip_exponent=True)
    # Non-finite operands give the plain non-finite result, not a rerun.
    assert np.isnan(cgx.contract("i,i->", np.array([np.nan, 1.0]), x))


def test_the_mps_200_instance_matches_exact_rationals():
    # The instance with operands that are outer products of per-axis factors k/256 (k in
    # 205..255, so entries are in [0.5, 1) and exact in binary): the network then factors
    # into one sum per label, Σ_i Π f(i) over the two operands holding it, whose exact
    # rational product is the value (about 10^400), and each gradient is the product of
    # the other labels' sums times the outer product of the partners' factors.
    inst = json.loads((DATA / "str_mps_varying_inner_product_200.json").read_text())
    eq, shapes = inst["format_string"], inst["shapes"]
    path = [tuple(p) for p in inst["paths"]["opt_size"]["path"]]
    terms = eq.split("->")[0].split(",")
    rng = np.random.default_rng(8)
    ints = [[rng.integers(205, 256, size=d) for d in s] for s in shapes]
    ops = []
    for fs in ints:
        t = np.ones(())
        for f in fs:
            t = np.multiply.outer(t, f / 256.0)
        ops.append(t)
    assert min(o.min() for o in ops) >= 0.5 and max(o.max() for o in ops) < 1
    holders: dict[str, list[tuple[int, int]]] = {}
    for at, term in enumerate(terms):
        for pos, label in enumerate(term):
            holders.setdefault(label, []).append((at, pos))
    assert all(len(h) == 2 for h in holders.values())
    sums = {}
    for label, ((at, p), (u, q)) in holders.items():
        sums[label] = Fraction(int(np.dot(ints[at][p].astype(object), ints[u][q].astype(object))), 256**2)
    want = math.prod(sums.values(), start=Fraction(1))
    assert log10_fraction(want) > 308
    assert np.isinf(cgx.contract(eq, *ops, optimize=path, strip_exponent=False))
    got = cgx.contract(eq, *ops, optimize=path, strip_exponent=True)
    k = round(got[1] / math.log10(2))
    assert abs(float(Fraction(float(got[0])) * Fraction(2) ** k / want) - 1) < 1e-12
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    picks = (0, 1, 57, 198, 199)
    value_, grads = expr.value_and_grad(*ops, wrt=list(picks), strip_exponent=True)
    assert value_[1] == got[1] and abs(value_[0] / got[0] - 1) < 1e-14
    for pick, (gm, ge) in zip(picks, grads):
        partners = []
        rest = Fraction(1)
        for label, s in sums.items():
            if label not in terms[pick]:
                rest *= s
        outer = np.ones(())
        for p, label in enumerate(terms[pick]):
            (u, q), = [h for h in holders[label] if h != (pick, p)]
            partners.append(ints[u][q] / 256.0)
            outer = np.multiply.outer(outer, partners[-1])
        scale = float(Fraction(2) ** round(ge / math.log10(2)) / rest)
        np.testing.assert_allclose(gm * scale, outer, rtol=1e-12)


@SETTINGS
@given(
    n=st.integers(0, 70),
    specials=st.lists(
        st.tuples(st.integers(0, 69), st.sampled_from([np.inf, -np.inf, np.nan, 5e-310, -1e-320, 1.0])),
        max_size=3,
    ),
    scale=st.sampled_from([1.0, 1e-300, 0.0]),
    step=st.sampled_from([1, 2]),
)
def test_left_range_equals_numpy(n, specials, scale, step):
    """``_core.left_range``'s lane loop over contiguous float64 arrays (and the plain loop
    over strided ones) against numpy's ``abs`` and ``max``: special values anywhere,
    tails shorter than a lane, results all below the normal range."""
    from cgx import _core

    x = np.linspace(-1.0, 1.0, n) * scale * 1e-10
    for i, v in specials:
        if i < n:
            x[i] = v
    view = x[::step]
    m = np.abs(view).max() if view.size else 0.0
    want = bool(not np.isfinite(m) or 0 < m < np.finfo(np.float64).tiny)
    assert _core.left_range(view) == want


def _left_range_by_numpy(x):
    """The range test of ``cgx._scaled.left_range`` by numpy's ``abs`` and ``max``."""
    if x.size == 0:
        return False
    m = np.abs(x).max()
    return bool(not np.isfinite(m) or 0 < m < np.finfo(x.dtype).tiny)


@SETTINGS
@given(
    scale=st.sampled_from([1.0, 1e-300, 0.0]),
    specials=st.lists(st.tuples(st.floats(0, 1), st.sampled_from([np.inf, -np.nan, 5e-310, -1e-320, 2.0])), max_size=2),
    threads=st.sampled_from([1, 2]),
)
def test_left_range_of_a_large_result_equals_numpy(scale, specials, threads):
    """``_core.left_range`` of a contiguous float64 array past the threshold of the
    parallel read (2^20 entries; a forward call's result, read without the GIL in chunks
    over the call's threads) against numpy's ``abs`` and ``max``, one thread and two:
    special values anywhere, whole arrays below the normal range."""
    from cgx import _core

    x = np.linspace(-1.0, 1.0, (1 << 20) + 5) * scale * 1e-10
    for at, v in specials:
        x[int(at * (x.size - 1))] = v
    with cgx.threads(threads):
        assert _core.left_range(x) == _left_range_by_numpy(x)


@SETTINGS
@given(
    parts=st.lists(
        st.tuples(
            st.sampled_from(["small", "large", "strided", "complex", "float32"]),
            st.sampled_from([1.0, 1e-300, 0.0]),
            st.lists(st.tuples(st.floats(0, 1), st.sampled_from([np.inf, -np.nan, 5e-310, -1e-320, 2.0])), max_size=2),
        ),
        max_size=4,
    ),
    threads=st.sampled_from([1, 2]),
)
def test_any_left_range_equals_numpy(parts, threads):
    """``_scaled.any_left_range`` (``_core.any_left_range``: contiguous float64 arrays read
    in chunks over the call's threads, each array's chunks combined; the others one by one)
    against numpy's ``abs`` and ``max`` per array: special values anywhere, in arrays past
    the threshold of the parallel read (2^20 entries) and below it, strided, complex and
    float32 ones, whole arrays below the normal range."""
    from cgx import _scaled

    sizes = {"small": 37, "large": (1 << 20) + 3, "strided": 74, "complex": 20, "float32": 30}
    arrays = []
    for kind, scale, specials in parts:
        x = np.linspace(-1.0, 1.0, sizes[kind]) * scale * 1e-10
        for at, v in specials:
            x[int(at * (x.size - 1))] = v
        if kind == "strided":
            x = x[::2]
        elif kind == "complex":
            with np.errstate(invalid="ignore"):  # inf times 1j has a NaN real part
                x = x + 1j * x[::-1]
        elif kind == "float32":
            x = x.astype(np.float32)
        arrays.append(x)
    want = any(_left_range_by_numpy(x) for x in arrays)
    with cgx.threads(threads):
        got = _scaled.any_left_range(arrays[0], arrays[1:]) if arrays else _scaled.any_left_range(np.zeros(0), [])
    assert got == want


TINY = np.finfo(np.float64).tiny
HUGE = np.finfo(np.float64).max


@SETTINGS
@given(
    n=st.sampled_from([0, 1, 7, 37, (1 << 19) + 3]),
    scale=st.sampled_from([1.0, 1e-300, 0.0, TINY / 1.45, TINY / 1.3, TINY * 0.7, TINY / 2.0, HUGE / 1.6, HUGE / 1.2, HUGE * 0.8]),
    parts=st.sampled_from(["both", "real", "imaginary"]),
    specials=st.lists(
        st.tuples(st.floats(0, 1), st.sampled_from([np.inf, -np.inf, np.nan, 5e-310, TINY * 0.71, HUGE * 0.72, 2.0])),
        max_size=2,
    ),
    strided=st.booleans(),
    threads=st.sampled_from([1, 2]),
)
def test_complex_left_range_equals_numpy(n, scale, parts, specials, strided, threads):
    """``_core.left_range`` and ``_scaled.any_left_range`` of complex128 arrays (decided
    from the parts' scan, the moduli computed only near the ends of the range) against
    numpy's ``abs`` (moduli) and ``max``: largest moduli just below and above the normal
    range's bottom and float64's top within a factor √2 of a part, special values in
    either part, arrays past the threshold of the parallel read, strided views."""
    from cgx import _core, _scaled

    re = np.linspace(-1.0, 1.0, n) * scale
    im = re[::-1].copy()
    if parts == "real":
        im[:] = 0.0
    elif parts == "imaginary":
        re[:] = 0.0
    for at, v in specials:
        if n:
            k = int(at * (n - 1))
            re[k] = v
            im[n - 1 - k] = v
    x = np.empty(n, dtype=np.complex128)
    x.real, x.imag = re, im
    if strided:
        x = x[::2]
    with np.errstate(over="ignore", invalid="ignore"):
        want = _left_range_by_numpy(x)
    with cgx.threads(threads):
        assert _core.left_range(x) == want
        assert _scaled.any_left_range(np.ones(3), [x]) == want
        assert _scaled.any_left_range(x, [np.ones(2, dtype=complex)]) == want
