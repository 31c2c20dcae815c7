"""``strip_exponent`` on Dask (a LocalCluster on 127.0.0.1, two workers in this process):
scaled contractions and gradients summed over slice ranges equal the single-process
scaled ones (sliced labels summed, in the output, and both; any number of tasks), the
plain ones where both are finite, and exact rationals where the plain one overflows; the
default reruns scaled a plain result that left the range. The engine-neutral combination
of two ranges' pairs is checked against exact rationals."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgx.distributed.combine import add_scaled, fit_scaled

distributed = pytest.importorskip("distributed")

from clusters import local_client  # noqa: E402

import cgx  # noqa: E402
from cgx import distributed as cd  # noqa: E402
from strategies import sliced_networks  # noqa: E402

LOG10_2 = math.log10(2)


@pytest.fixture(scope="module")
def client():
    with local_client(distributed, processes=False) as c:
        yield c


def exact(pair):
    """The exact rational value of a real ``(mantissa, exponent)`` pair, entry by entry."""
    m, e = pair
    k = int(round(e / LOG10_2))
    two = Fraction(2) ** k
    return [Fraction(float(x)) * two for x in np.ravel(m)]


def assert_same(got, want, rtol=1e-13):
    """Two scaled pairs with the same value: the mantissas at the larger exponent agree."""
    (gm, ge), (wm, we) = got, want
    assert np.shape(gm) == np.shape(wm)
    top = max(ge, we)
    np.testing.assert_allclose(gm * 10.0 ** (ge - top), wm * 10.0 ** (we - top), rtol=rtol, atol=rtol)


# As in test_distributed: slices summed, placed in the output, and both.
NETWORKS = [
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "bc"),
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "da"),
    ("ab,bc->ac", [(6, 5), (5, 3)], "ba"),
]


@pytest.mark.parametrize("network", NETWORKS, ids=["summed", "in-output", "both"])
@pytest.mark.parametrize("n_tasks", [None, 1, 3])
def test_scaled_value_and_gradients_match_single_process(client, network, n_tasks):
    eq, shapes, sliced = network
    rng = np.random.default_rng(3)
    # Entries about 10^200: every product of two overflows float64.
    ops = [rng.random(s) * 1e200 for s in shapes]
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    assert expr.n_slices > 1 and np.isinf(expr(*ops, strip_exponent=False)).all()
    got = cd.contract(eq, *ops, sliced_inds=sliced, client=client, n_tasks=n_tasks, strip_exponent=True)
    want = expr(*ops, strip_exponent=True)
    assert_same(got, want)
    # The default reruns scaled: the value does not fit, so it is a pair.
    auto = cd.contract(eq, *ops, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    assert isinstance(auto, tuple)
    assert_same(auto, want)
    plain = cd.contract(eq, *ops, sliced_inds=sliced, client=client, n_tasks=n_tasks, strip_exponent=False)
    assert np.isinf(plain).all()
    cot = rng.standard_normal(expr.output_shape)
    value, grads = cd.value_and_grad(
        eq, *ops, wrt=[0, 1], cotangent=cot, sliced_inds=sliced, client=client, n_tasks=n_tasks, strip_exponent=True
    )
    want_value, want_grads = expr.value_and_grad(*ops, wrt=[0, 1], cotangent=cot, strip_exponent=True)
    assert_same(value, want_value)
    assert len(grads) == 2
    for g, w in zip(grads, want_grads):
        assert_same(g, w)
    # Default: the value left the range, so everything is rerun; the gradients of the
    # two-operand network fit and come as arrays.
    value, grads = cd.value_and_grad(eq, *ops, wrt=[0, 1], cotangent=cot, sliced_inds=sliced, client=client)
    assert isinstance(value, tuple)
    for g, w in zip(grads, want_grads):
        if isinstance(g, tuple):
            assert_same(g, w)
        else:
            np.testing.assert_allclose(g, w[0] * 10.0 ** w[1], rtol=1e-13)


def test_products_of_1e300_numbers_match_fractions(client):
    x = np.array([3e300, -1e300, 2.5e300, 7e299])
    y = np.array([1e300, 4e300, 1e300, 2e300])
    want = sum(Fraction(a) * Fraction(b) for a, b in zip(x, y))
    got = cd.contract("i,i->", x, y, sliced_inds="i", client=client, n_tasks=4, strip_exponent=True)
    assert float(abs(exact(got)[0] / want - 1)) < 1e-15
    # An intermediate of 10^600 in every slice and a result that fits: the default gives
    # the plain array, which the plain run cannot.
    a, c = np.full((2, 2), 1e300), np.full((2, 2), 1e-300)
    path = [(0, 1), (0, 1)]
    plain = cd.contract("ab,bc,cd->ad", a, a, c, optimize=path, sliced_inds="b", client=client, strip_exponent=False)
    assert np.isinf(plain).all()
    auto = cd.contract("ab,bc,cd->ad", a, a, c, optimize=path, sliced_inds="b", client=client)
    assert isinstance(auto, np.ndarray)
    np.testing.assert_allclose(auto, np.full((2, 2), float(Fraction(1e300) ** 2 * Fraction(1e-300) * 4)), rtol=1e-14)


def test_an_mps_inner_product_over_slices_matches_exact_integers(client):
    # 200 sites, physical dimension 10, bond 3, entries k/64 for k in 32..63 (in [0.5, 1),
    # exact in binary): about 10^340, past float64's range; exact in integers site by site.
    n, d, chi = 200, 10, 3
    rng = np.random.default_rng(11)
    bra = [rng.integers(32, 64, size=(d,) + ((chi,) if k else ()) + ((chi,) if k < n - 1 else ())) for k in range(n)]
    ket = [rng.integers(32, 64, size=b.shape) for b in bra]
    terms = []
    for side in range(2):
        for k in range(n):
            lab = [f"s{k}"] + ([f"{side}.{k - 1}"] if k else []) + ([f"{side}.{k}"] if k < n - 1 else [])
            terms.append(lab)
    names: dict[str, str] = {}
    eq = ",".join("".join(names.setdefault(l, cgx.get_symbol(len(names))) for l in t) for t in terms) + "->"
    ops = [b / 64.0 for b in bra] + [k / 64.0 for k in ket]
    env = np.einsum("sa,sb->ab", bra[0].astype(object), ket[0].astype(object))
    for k in range(1, n - 1):
        env = np.einsum("ab,sac,sbd->cd", env, bra[k].astype(object), ket[k].astype(object), optimize=False)
    total = np.einsum("ab,sa,sb->", env, bra[-1].astype(object), ket[-1].astype(object), optimize=False)
    want = Fraction(int(total), 64 ** (2 * n))
    assert math.log10(want.numerator) - math.log10(want.denominator) > 308
    sliced = [names["s0"], names["0.0"]]
    assert np.isinf(cgx.contract(eq, *ops, sliced_inds=sliced, strip_exponent=False))
    got = cd.contract(eq, *ops, sliced_inds=sliced, client=client, n_tasks=3, strip_exponent=True)
    assert float(abs(exact(got)[0] / want - 1)) < 1e-12


@settings(max_examples=10, deadline=None)
@given(case=sliced_networks())
def test_random_networks_scaled_equal_plain(client, case):
    eq, sliced, n_tasks = case.eq, case.sliced, case.n_tasks
    _, ops = case.operands()
    plain = cgx.contract(eq, *ops)
    m, e = cd.contract(eq, *ops, sliced_inds=sliced, client=client, n_tasks=n_tasks, strip_exponent=True)
    big = max(np.abs(m.real).max(), np.abs(m.imag).max()) if m.size else 0
    assert big == 0 or 0.5 <= big < 1
    np.testing.assert_allclose(m * 10.0**e, plain, rtol=1e-10, atol=1e-10 * (1 + np.abs(plain).max(initial=0)))


def test_bad_arguments_raise_like_the_local_api(client):
    x = np.ones(3)
    with pytest.raises(TypeError, match="strip_exponent"):
        cd.contract("i,i->", x, x, client=client, strip_exponent="yes")  # type: ignore[arg-type]  # on purpose
    with pytest.raises(TypeError, match="submit"):
        cd.submit_contract("i,i->", x, x, client=client, strip_exponent=None)  # type: ignore[arg-type]  # on purpose
    with pytest.raises(ValueError, match="shape"):
        cd.contract("i,i->", x, np.ones(4), client=client, strip_exponent=True)
    with pytest.raises(ValueError, match="operand 2"):
        cd.value_and_grad("i,i->", x, x, wrt=[2], client=client, strip_exponent=True)
    # A scalar output: the workers' sum of 0-d arrays is a numpy scalar, rerun all the same.
    m, e = cd.contract("i,i->", x * 1e200, x * 1e200, sliced_inds="i", client=client)
    assert abs(math.log10(m) + e - (400 + math.log10(3))) < 1e-12
    fut = cd.submit_value_and_grad("i,i->", x * 1e200, x * 1e200, sliced_inds="i", client=client, strip_exponent=True)
    (m, e), grads = fut.result()
    assert abs(math.log10(m) + e - (400 + math.log10(3))) < 1e-12 and len(grads) == 2


def normalized(m, k):
    """``(mantissa, exponent)`` of ``m * 2**k`` with the mantissa's largest magnitude in
    ``[0.5, 1)``, as the engine gives pairs (all zero: exponent 0)."""
    m = np.array(m)
    big = np.abs(m).max()
    if big == 0:
        return m, 0.0
    shift = math.frexp(big)[1]
    return np.ldexp(m, -shift), (k + shift) * LOG10_2


@settings(max_examples=200, deadline=None)
@given(
    ma=st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
    mb=st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
    ka=st.integers(-3000, 3000),
    kb=st.integers(-3000, 3000),
)
def test_adding_two_pairs_is_exact_up_to_one_rounding(ma, mb, ka, kb):
    a, b = normalized(ma, ka), normalized(mb, kb)
    got = add_scaled(a, b)
    big = np.abs(got[0]).max()
    assert big == 0 or 0.5 <= big < 1
    # Against exact rationals: the part of smaller exponent is scaled by an exact power of
    # two (rounded only where it falls below the subnormals of the larger exponent K),
    # then one float addition rounds: within 2^(K-53) + 2^(K-1074) of the exact sum.
    k = max(int(round(a[1] / LOG10_2)), int(round(b[1] / LOG10_2)))
    bound = Fraction(2) ** (k - 53) + Fraction(2) ** (k - 1074)
    for g, w in zip(exact(got), [x + y for x, y in zip(exact(a), exact(b))]):
        assert abs(g - w) <= bound
    fitted = fit_scaled(got)
    if isinstance(fitted, np.ndarray):
        for f, g in zip(fitted, exact(got)):
            # Exact, unless the entry falls among the subnormals.
            assert Fraction(float(f)) == g or abs(g) < Fraction(2) ** -1022
    else:
        top = int(round(got[1] / LOG10_2)) + math.frexp(big)[1]
        assert not -1021 <= top <= 1024
