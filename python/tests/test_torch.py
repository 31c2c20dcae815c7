"""cgx.torch.contract against torch.einsum: values and gradients, real and complex, and
torch.autograd.gradcheck. Skipped where PyTorch is not installed (CI does not install it)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
import cgx.torch  # noqa: E402

from strategies import expressions  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None)


def tensors(rng, shapes, complex_):
    out = []
    for s in shapes:
        a = rng.standard_normal(s)
        if complex_:
            a = a + 1j * rng.standard_normal(s)
        out.append(torch.tensor(a, requires_grad=True))
    return out


@SETTINGS
@given(case=expressions(explicit=True), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_values_and_gradients_match_torch_einsum(case, complex_, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    xs = tensors(rng, shapes, complex_)
    ys = [x.detach().clone().requires_grad_(True) for x in xs]
    out = cgx.torch.contract(eq, *xs)
    want = torch.einsum(eq, *ys)
    assert out.shape == want.shape and out.dtype == want.dtype
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-10)
    c = torch.tensor(rng.standard_normal(tuple(want.shape)) + (1j * rng.standard_normal(tuple(want.shape)) if complex_ else 0))
    # A real loss of a complex output: Re(sum(conj(c) * out)), PyTorch's convention.
    loss = lambda o: torch.real(torch.sum(torch.conj(c) * o))  # noqa: E731
    gs = torch.autograd.grad(loss(out), xs)
    ws = torch.autograd.grad(loss(want), ys)
    for g, w in zip(gs, ws):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-10)


def test_only_the_operands_that_need_a_gradient_get_one() -> None:
    rng = np.random.default_rng(0)
    a = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    b = torch.tensor(rng.standard_normal((4, 5)))  # no gradient
    out = cgx.torch.contract("ij,jk->ik", a, b)
    out.sum().backward()
    assert b.grad is None
    np.testing.assert_allclose(a.grad.numpy(), np.ones((3, 5)) @ b.numpy().T, rtol=1e-12)


def test_a_real_operand_of_a_complex_contraction_gets_a_real_gradient() -> None:
    rng = np.random.default_rng(1)
    a = torch.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    z = torch.tensor(rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2)), requires_grad=True)
    out = cgx.torch.contract("ij,jk->ik", a, z)
    torch.real(out).sum().backward()
    a2, z2 = a.detach().clone().requires_grad_(True), z.detach().clone().requires_grad_(True)
    # torch.einsum wants one dtype: the cast to complex passes back the real part.
    torch.real(torch.einsum("ij,jk->ik", a2.to(torch.complex128), z2)).sum().backward()
    assert a.grad.dtype == torch.float64
    np.testing.assert_allclose(a.grad.numpy(), a2.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(z.grad.numpy(), z2.grad.numpy(), rtol=1e-12)


def test_gradcheck() -> None:
    rng = np.random.default_rng(2)
    xs = tensors(rng, [(2, 3), (3, 4), (4, 2)], False)
    assert torch.autograd.gradcheck(lambda *t: cgx.torch.contract("ij,jk,kl->il", *t), xs)
    zs = tensors(rng, [(2, 3), (3, 2)], True)
    assert torch.autograd.gradcheck(lambda *t: cgx.torch.contract("ij,jk->ik", *t), zs)


def test_errors_are_value_errors() -> None:
    a = torch.ones((2, 3))
    with pytest.raises(ValueError, match="label `j` has size"):
        cgx.torch.contract("ij,jk->ik", a, torch.ones((2, 2)))
