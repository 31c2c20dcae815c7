"""Every bad input raises a Python exception carrying the Rust error's message."""

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from cgx import _core

A23, A34 = np.ones((2, 3)), np.ones((3, 4))

# (expression, operands or shapes, optimize, the message's telling part)
BAD = [
    # subscripts
    ("ab,b>->a", [(2, 3), (3,)], "greedy", "`>` is not a label"),
    ("a\x07", [(2,)], "greedy", "is not a label"),
    ("ab->aa", [(2, 3)], "greedy", "output label `a` appears twice"),
    ("ab->c", [(2, 3)], "greedy", "output label `c` appears in no operand"),
    ("ab->a->b", [(2, 3)], "greedy", "more than one `->`"),
    ("a-b", [(2,)], "greedy", "`-` must be followed by `>`"),
    ("...a...,a", [(2,), (2,)], "greedy", "operand 0 has two ellipses"),
    ("...a,a->......", [(2,), (2,)], "greedy", "the output has two ellipses"),
    ("a->a,b", [(2,)], "greedy", "`,` after `->`"),
    # shapes
    ("ij,jk->ik", [(2, 3), (5, 4)], "greedy", "label `j` has size 3 in operand 0 (axis 1, shape [2, 3]) and 5 in operand 1"),
    ("ij,jk->ik", [(2, 3)], "greedy", "2 operands but 1 shapes"),
    ("ij,jk->ik", [(2, 3), (3,)], "greedy", "rank 2"),
    ("ii->i", [(2, 3)], "greedy", "label `i` is repeated in operand 0 (shape [2, 3]) on axes 0 and 1"),
    # paths
    ("ij,jk->ik", [(2, 3), (3, 4)], [(0, 0)], "step 0: names position 0 twice"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], [(0, 1), (1, 2)], "step 1: position 2 is out of range"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], [(0, 1)], "leaves 2 operands uncontracted"),
    ("ij,jk->ik", [(2, 3), (3, 4)], [(0, 5, 1)], "out of range"),
    # a position out of range after a step of three operands (two remain, not four)
    ("ij,jk,kl,lm->im", [(2, 3), (3, 4), (4, 5), (5, 6)], [(0, 1, 2), (0, 3)], "invalid contraction path at step 1"),
    ("ij,jk->ik", [(2, 3), (3, 4)], [(0, -1)], "step 0: position -1 is out of range"),
    ("ij,jk->ik", [(2, 3), (3, 4)], [("a", "b")], "not a tuple of positions"),
    ("ij,jk->ik", [(2, 3), (3, 4)], "no-such-optimizer", "no-such-optimizer"),
]


@pytest.mark.parametrize("eq, shapes, optimize, message", BAD)
def test_bad_inputs_raise_value_error_everywhere(eq, shapes, optimize, message):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError, match=None) as e:
        cgx.contract(eq, *ops, optimize=optimize)
    assert message in str(e.value)
    with pytest.raises(ValueError) as e:
        cgx.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    assert message in str(e.value)
    with pytest.raises(ValueError) as e:
        cgx.contract_expression(eq, *shapes, optimize=optimize)
    assert message in str(e.value)


def test_no_operands() -> None:
    with pytest.raises(ValueError, match="0 shapes"):
        cgx.contract("ab")
    with pytest.raises(ValueError, match="2 operands but 1 shapes"):
        cgx.contract_expression("a,a", (2,), optimize=[])


def test_expression_calls_check_their_operands() -> None:
    expr = cgx.contract_expression("ij,jk->ik", (2, 3), (3, 4))
    with pytest.raises(ValueError, match="takes 2 operands but 1 were given"):
        expr(A23)
    with pytest.raises(ValueError, match=r"operand 1 of `ij,jk->ik` has shape \[3, 5\]"):
        expr(A23, np.ones((3, 5)))
    with pytest.raises(ValueError, match="operand 0"):
        expr.value_and_grad(np.ones((3, 3)), A34, cotangent=np.ones((2, 4)))
    with pytest.raises(ValueError, match="non-scalar output of shape"):
        expr.value_and_grad(A23, A34)
    with pytest.raises(ValueError, match="cotangent 0 of `ij,jk->ik` has shape"):
        expr.value_and_grad(A23, A34, cotangent=np.ones((4, 2)))
    with pytest.raises(ValueError, match="operand 1 is listed twice"):
        expr.value_and_grad(A23, A34, wrt=[1, 1], cotangent=np.ones((2, 4)))
    with pytest.raises(ValueError, match="operand 7: there are 2"):
        expr.value_and_grad(A23, A34, wrt=7, cotangent=np.ones((2, 4)))
    with pytest.raises(TypeError, match="cotangent 0 is complex"):
        expr.value_and_grad(A23, A34, cotangent=np.ones((2, 4)) * 1j)
    with pytest.raises(ValueError, match="direction 0 of `ij,jk->ik` has shape"):
        expr.hvp(A23, A34, directions=[A34, A34], cotangent=np.ones((2, 4)))
    with pytest.raises(ValueError, match="direction"):
        expr.hvp(A23, A34, directions=[A23], cotangent=np.ones((2, 4)))


def test_dtypes_that_are_not_numbers_raise_type_error() -> None:
    with pytest.raises(TypeError, match="operand 1 has dtype <U1"):
        cgx.contract("i,i->", np.ones(2), np.array(["a", "b"]))
    with pytest.raises(TypeError, match="dtype object"):
        cgx.contract("i->", np.array([None, 1], dtype=object))


def test_memory_limit_raises_memory_error() -> None:
    a = np.ones((10, 10))
    with pytest.raises(MemoryError, match="more than memory_limit=99"):
        cgx.contract("ab,cd->abcd", a, a, memory_limit=99)
    assert cgx.contract("ab,cd->abcd", a, a, memory_limit=10**4).shape == (10,) * 4
    with pytest.raises(MemoryError, match="memory_limit"):
        cgx.contract("ab,cd->abcd", a, a, memory_limit="max_input")
    with pytest.raises(MemoryError):
        cgx.contract_path("ab,cd->abcd", (10, 10), (10, 10), memory_limit=99)
    # An output over the limit: raised when the expression is built, as contract_path does.
    with pytest.raises(MemoryError, match="has 10000 elements, more than memory_limit=99"):
        cgx.contract_expression("ab,cd->abcd", (10, 10), (10, 10), memory_limit=99)
    with pytest.raises(ValueError, match="memory_limit must be"):
        cgx.contract("ab->ab", a, memory_limit="lots")


def test_an_intermediate_larger_than_the_machine_is_a_memory_error_not_an_abort() -> None:
    # 10^20 elements: without the check, the allocation would abort the process.
    v = np.ones(10**5)
    with pytest.raises(MemoryError, match="more than the memory budget"):
        cgx.contract("a,b,c,d->abcd", v, v, v, v)
    expr = cgx.contract_expression("a,b,c,d->abcd", *[(10**5,)] * 4)
    with pytest.raises(MemoryError):
        expr(v, v, v, v)
    with pytest.raises(MemoryError):
        expr.value_and_grad(v, v, v, v, cotangent=np.ones(1))
    # The report itself needs no memory.
    _, info = cgx.contract_path("a,b,c,d->abcd", *[(10**5,)] * 4, shapes=True)
    assert info.largest_intermediate == 1e20


@settings(max_examples=300, deadline=None)
@given(eq=st.text(alphabet="abij,->. \x00é", max_size=12), ranks=st.lists(st.integers(0, 3), max_size=4))
def test_arbitrary_subscripts_never_crash(eq, ranks):
    ops = [np.ones((2,) * r) for r in ranks]
    try:
        out = cgx.contract(eq, *ops)
    except ValueError as e:
        assert str(e)
    else:
        if set(eq) <= set("abij,->"):  # numpy reads only ASCII letters
            np.testing.assert_allclose(out, np.einsum(eq, *ops))
        else:
            assert isinstance(out, np.ndarray)


@contextlib.contextmanager
def machine_memory(nbytes):
    """Sets the memory budget of every contraction built meanwhile (and of graphs and
    copies) to ``nbytes``, as on a machine with room for that."""
    _core.set_memory_budget(float(nbytes))
    try:
        yield
    finally:
        _core.set_memory_budget(None)


def test_without_memory_limit_the_budget_is_the_one_policy() -> None:
    # The einsum crate's policy, shared with the library and the command line: half of
    # the machine, at most 8 GiB.
    assert 0 < _core.memory_budget() <= 8 * 2**30
    # `ab,cd` first: a 2^31-element (16 GiB) intermediate, over that; within a budget of
    # 2^50 bytes it fits. An empty slice range builds the whole contraction (with its
    # memory check) but allocates only the output.
    shapes = [(256, 256), (256, 256), (256, 128)]
    ops = [np.ones(s) for s in shapes]
    with machine_memory(2**50):
        expr = cgx.contract_expression("ab,bc,cd->ad", *shapes, optimize=[(0, 2), (0, 1)])
        assert expr._plan()[3][0][2] == 2**31
        np.testing.assert_array_equal(expr.eval_slices(*ops, start=0, stop=0), np.zeros((256, 128)))
        value, grads = expr.value_and_grad_slices(*ops, start=0, stop=0, cotangent=np.ones((256, 128)))
        assert value.shape == (256, 128) and [g.shape for g in grads] == shapes
    # Within 8 GiB it does not, and says so before allocating.
    with machine_memory(2**33), pytest.raises(MemoryError, match="more than the memory budget"):
        cgx.contract_expression("ab,bc,cd->ad", *shapes, optimize=[(0, 2), (0, 1)])(*ops)


def test_the_crates_memory_error_is_a_memory_error() -> None:
    v = np.ones(1000)
    # An operand alone over the machine's memory (the crate's check of each operand).
    with machine_memory(4096), pytest.raises(MemoryError, match=r"memory limit exceeded: operand 0 of shape \[1000\]"):
        cgx.contract_expression("i,i->", (1000,), (1000,))(v, v)
    # Two operands that fit alone but not together (the tensors alive at once).
    with machine_memory(12_000), pytest.raises(MemoryError, match="operand 1 of shape \\[1000\\], with the tensors alive"):
        cgx.contract_expression("i,i->", (1000,), (1000,))(v, v)


def test_a_gradient_or_hvp_over_the_memory_when_the_forward_fits_is_a_memory_error() -> None:
    # memory_limit (elements) bounds intermediates, which a reverse pass does not exceed;
    # the byte budget of the reverse pass is the machine's memory, so lower that.
    a = np.ones((100, 100))
    c = np.ones((100, 100))
    with machine_memory(250_000):
        expr = cgx.contract_expression("ij,jk->ik", a.shape, a.shape)
        np.testing.assert_allclose(expr(a, a), a @ a)
        with pytest.raises(MemoryError, match="memory limit exceeded.*gradient"):
            expr.value_and_grad(a, a, cotangent=c)
        with pytest.raises(MemoryError, match="memory limit exceeded"):
            expr.hvp(a, a, directions=[a, a], cotangent=c)


def test_an_ellipsis_over_memory_limit_is_a_memory_error() -> None:
    # `...i,...j` first makes 200 elements, over the limit of 50; the output (2) fits, so
    # the limit asks for slicing, which an expression with an ellipsis cannot have yet.
    x, y, m = np.ones((2, 10)), np.ones((2, 10)), np.ones((10, 10))
    message = "more than memory_limit=50, and it cannot be sliced: .*only expressions with named labels"
    with pytest.raises(MemoryError, match=message):
        cgx.contract("...i,...j,ij->...", x, y, m, optimize=[(0, 1), (0, 1)], memory_limit=50)
    with pytest.raises(MemoryError, match=message):
        cgx.contract_expression("...i,...j,ij->...", x.shape, y.shape, m.shape, optimize=[(0, 1), (0, 1)], memory_limit=50)
    # Named labels are sliced instead.
    out = cgx.contract("ai,aj,ij->a", x, y, m, optimize=[(0, 1), (0, 1)], memory_limit=50)
    np.testing.assert_allclose(out, np.einsum("ai,aj,ij->a", x, y, m))


@pytest.mark.parametrize(
    "shape, message",
    [((2**40,), r"shape \[1099511627776\] needs 8796093022208 bytes"), ((2**20, 2**20), r"shape \[1048576, 1048576\] needs")],
)
def test_operands_of_2_40_elements_are_memory_errors(shape, message):
    # No such array fits, but a broadcast view of one does: copying it is refused.
    eq = "i->" if len(shape) == 1 else "ij->"
    huge = np.broadcast_to(np.ones(1), shape)
    with pytest.raises(MemoryError, match=message):
        cgx.contract_expression(eq, shape)(huge)
    with pytest.raises(MemoryError, match=message):
        cgx.contract(eq, huge)
    # The report needs no memory.
    _, info = cgx.contract_path(eq, shape, shapes=True)
    assert info.size_dict["i"] == shape[0]


def test_an_outer_product_of_2_20_vectors_is_a_memory_error() -> None:
    v = np.ones(2**20)
    expr = cgx.contract_expression("i,j->ij", (2**20,), (2**20,))
    with pytest.raises(MemoryError, match="more than the memory budget"):
        expr(v, v)
    with pytest.raises(MemoryError, match="more than memory_limit=1048576"):
        cgx.contract("i,j->ij", v, v, memory_limit=2**20)


def test_negative_or_huge_sizes_positions_and_indices_are_value_errors() -> None:
    a = np.ones((2, 2))
    for call in [
        lambda: cgx.contract_expression("i->", (-1,)),
        lambda: cgx.contract_path("i->", (-1,), shapes=True),
        lambda: cgx.contract_path("i->", [2**64], shapes=True),
        lambda: cgx.contract_expression("i->", (1.5,)),
    ]:
        with pytest.raises(ValueError, match="non-negative integer below 2\\^64|must be an integer"):
            call()
    expr = cgx.contract_expression("ij,jk->ik", (2, 2), (2, 2), sliced_inds="j")
    with pytest.raises(ValueError, match="cannot differentiate with respect to operand -1: there are 2"):
        expr.value_and_grad(a, a, wrt=-1, cotangent=a)
    with pytest.raises(ValueError, match="cannot differentiate with respect to operand -1"):
        expr.grad_slices(a, a, wrt=[0, -1], cotangent=a)
    with pytest.raises(ValueError, match="slice range -1.. is not within 0..2"):
        expr.eval_slices(a, a, start=-1)
    with pytest.raises(ValueError, match="slice range 0..-2 is not within 0..2"):
        expr.value_and_grad_slices(a, a, stop=-2, cotangent=a)


def test_bad_slicing_input_raises_its_exception() -> None:
    a, b = np.ones((4, 4)), np.ones((4, 5))
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape, sliced_inds="j")
    assert expr.n_slices == 4
    with pytest.raises(ValueError, match=r"slicing error: slice range 3..1 is not within 0..4"):
        expr.eval_slices(a, b, start=3, stop=1)
    with pytest.raises(ValueError, match=r"slice range 0..5 is not within 0..4"):
        expr.grad_slices(a, b, stop=5, cotangent=np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"operand 1 of `ij,jk->ik` has shape \[5, 4\]"):
        expr.eval_slices(a, b.T, start=0, stop=2)
    with pytest.raises(ValueError, match=r"cotangent 0 of `ij,jk->ik` has shape \[5, 4\]"):
        expr.grad_slices(a, b, start=1, stop=3, cotangent=np.ones((5, 4)))
    # Explicit labels that leave a slice over memory_limit: `ab`, then `cab` (1000
    # elements); sliced on `a`, a slice still holds `bc` (100), over 50.
    v, t = np.ones(10), np.ones((10, 10, 10))
    path = [(0, 1), (0, 2), (0, 1)]
    with pytest.raises(MemoryError, match="the largest intermediate has 100 elements, more than memory_limit=50"):
        cgx.contract("a,b,c,abc->", v, v, v, t, optimize=path, memory_limit=50, sliced_inds="a")
    with pytest.raises(MemoryError, match="more than memory_limit=50"):
        cgx.contract_expression("a,b,c,abc->", *[(10,)] * 3, t.shape, optimize=path, memory_limit=50, sliced_inds="a")(v, v, v, t)
    assert cgx.contract("a,b,c,abc->", v, v, v, t, optimize=path, memory_limit=100, sliced_inds="a") == 1000
    # An operand over memory_limit alone: memory_limit bounds intermediates (opt_einsum's
    # meaning), so it contracts; an operand over the machine's memory does not (above).
    assert cgx.contract("abc->", t, memory_limit=10) == 1000
