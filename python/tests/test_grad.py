"""value_and_grad and hvp against finite differences and closed numpy formulas.

Conventions: the gradient with respect to operand i for cotangent c is the adjoint of
the contraction's derivative for the real inner product <a, b> = Re(sum(conj(a) * b)):
for a contraction linear in each operand, einsum(c, conj(others) -> labels of i), summed
over labels of i that appear nowhere else (so broadcast back) and read on the diagonal
where i repeats a label.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions, split

SETTINGS = settings(max_examples=100, deadline=None)


def inner(a, b):
    return float(np.real(np.vdot(a, b)))


@SETTINGS
@given(case=expressions(explicit=True), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_gradients_match_finite_differences(case, complex_, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_)
    expr = cgx.contract_expression(eq, *shapes)
    value = np.einsum(eq, *ops)
    c = arrays(rng, [np.shape(value)], complex_)[0]
    got, grads = expr.value_and_grad(*ops, cotangent=c)
    np.testing.assert_allclose(got, value, rtol=1e-10, atol=1e-10)
    assert len(grads) == len(ops)

    def f(xs):
        return inner(c, np.einsum(eq, *xs))

    # f is linear in each operand alone, so a central difference along one operand is exact
    # up to rounding; h = 1 keeps rounding small.
    for i, g in enumerate(grads):
        assert g.shape == shapes[i] and g.dtype == ops[i].dtype
        d = arrays(rng, [shapes[i]], complex_)[0]
        plus = [x + d if k == i else x for k, x in enumerate(ops)]
        minus = [x - d if k == i else x for k, x in enumerate(ops)]
        fd = (f(plus) - f(minus)) / 2
        assert abs(inner(g, d) - fd) <= 1e-9 * (1 + abs(fd)), (i, inner(g, d), fd)


@SETTINGS
@given(case=expressions(explicit=True, repeats=False), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_gradients_match_the_einsum_formula(case, complex_, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_)
    terms, out = split(eq)
    c = arrays(rng, [np.shape(np.einsum(eq, *ops))], complex_)[0]
    wrt = list(range(len(ops)))[::-1]  # any order
    _, grads = cgx.contract_expression(eq, *shapes).value_and_grad(*ops, wrt=wrt, cotangent=c)
    for g, i in zip(grads, wrt):
        others = [k for k in range(len(ops)) if k != i]
        elsewhere = set(out).union(*(terms[k] for k in others))
        lonely = [x for x in terms[i] if x not in elsewhere]  # summed in operand i alone
        sizes = dict(zip(terms[i], shapes[i]))
        eq_i = ",".join([out] + [terms[k] for k in others] + lonely) + "->" + terms[i]
        want = np.einsum(eq_i, c, *[np.conj(ops[k]) for k in others], *[np.ones(sizes[x]) for x in lonely])
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10, err_msg=eq_i)


def test_matrix_product_gradients_in_closed_form() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    c = rng.standard_normal((3, 5))
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape)
    value, (da, db) = expr.value_and_grad(a, b, cotangent=c)
    np.testing.assert_allclose(value, a @ b, rtol=1e-12)
    np.testing.assert_allclose(da, c @ b.T, rtol=1e-12)
    np.testing.assert_allclose(db, a.T @ c, rtol=1e-12)
    _, (only_b,) = expr.value_and_grad(a, b, wrt=1, cotangent=c)
    np.testing.assert_allclose(only_b, db, rtol=1e-12)


def test_trace_and_scalar_gradients() -> None:
    rng = np.random.default_rng(1)
    m = rng.standard_normal((4, 4))
    value, (dm,) = cgx.contract_expression("ii->", (4, 4)).value_and_grad(m)
    assert value == pytest.approx(np.trace(m))
    np.testing.assert_array_equal(dm, np.eye(4))
    # f(A, B) = tr(A B): df/dA = B^T.
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 3))
    value, (da, db) = cgx.contract_expression("ij,ji->", a.shape, b.shape).value_and_grad(a, b)
    assert value == pytest.approx(np.trace(a @ b))
    np.testing.assert_allclose(da, b.T, rtol=1e-12)
    np.testing.assert_allclose(db, a.T, rtol=1e-12)


def test_complex_gradient_convention() -> None:
    # f(z, w) = sum(z * w): the gradient with respect to z for cotangent 1 is conj(w).
    z = np.array([1 + 2j, -1j])
    w = np.array([0.5 - 1j, 2 + 0j])
    _, (dz, dw) = cgx.contract_expression("i,i->", (2,), (2,)).value_and_grad(z, w)
    np.testing.assert_allclose(dz, np.conj(w))
    np.testing.assert_allclose(dw, np.conj(z))


@SETTINGS
@given(case=expressions(explicit=True, max_operands=3), seed=st.integers(0, 2**32 - 1))
def test_hvp_matches_finite_differences_of_gradients(case, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes)
    c = arrays(rng, [np.shape(np.einsum(eq, *ops))])[0]
    expr = cgx.contract_expression(eq, *shapes)
    v = arrays(rng, shapes)
    hv = expr.hvp(*ops, directions=v, cotangent=c)

    def grads(xs):
        return expr.value_and_grad(*xs, cotangent=c)[1]

    # Moving every operand at once, the gradients are polynomials in the step of degree
    # below the number of operands: a central difference with a small step.
    h = 1e-4
    plus = grads([x + h * d for x, d in zip(ops, v)])
    minus = grads([x - h * d for x, d in zip(ops, v)])
    for got, p, m in zip(hv, plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * h), rtol=1e-5, atol=1e-6)


def test_gradients_of_a_network_are_compiled_once_and_reused() -> None:
    rng = np.random.default_rng(4)
    shapes = [(2, 3), (3, 4), (4, 2)]
    expr = cgx.contract_expression("ij,jk,ki->", *shapes)
    for _ in range(3):
        ops = arrays(rng, shapes)
        value, grads = expr.value_and_grad(*ops)
        assert value == pytest.approx(np.trace(ops[0] @ ops[1] @ ops[2]))
        np.testing.assert_allclose(grads[1], (ops[2] @ ops[0]).T, rtol=1e-12)
