"""Every bad input raises a Python exception carrying the Rust error's message."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx

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


def test_no_operands():
    with pytest.raises(ValueError, match="0 shapes"):
        cgx.contract("ab")
    with pytest.raises(ValueError, match="2 operands but 1 shapes"):
        cgx.contract_expression("a,a", (2,), optimize=[])


def test_expression_calls_check_their_operands():
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


def test_dtypes_that_are_not_numbers_raise_type_error():
    with pytest.raises(TypeError, match="operand 1 has dtype <U1"):
        cgx.contract("i,i->", np.ones(2), np.array(["a", "b"]))
    with pytest.raises(TypeError, match="dtype object"):
        cgx.contract("i->", np.array([None, 1], dtype=object))


def test_memory_limit_raises_memory_error():
    a = np.ones((10, 10))
    with pytest.raises(MemoryError, match="more than memory_limit=99"):
        cgx.contract("ab,cd->abcd", a, a, memory_limit=99)
    assert cgx.contract("ab,cd->abcd", a, a, memory_limit=10**4).shape == (10,) * 4
    with pytest.raises(MemoryError, match="memory_limit"):
        cgx.contract("ab,cd->abcd", a, a, memory_limit="max_input")
    with pytest.raises(MemoryError):
        cgx.contract_path("ab,cd->abcd", (10, 10), (10, 10), memory_limit=99)
    expr = cgx.contract_expression("ab,cd->abcd", (10, 10), (10, 10), memory_limit=99)
    with pytest.raises(MemoryError):
        expr(a, a)
    with pytest.raises(MemoryError):
        expr.value_and_grad(a, a, cotangent=np.ones((10,) * 4))
    with pytest.raises(MemoryError):
        expr.hvp(a, a, directions=[a, a], cotangent=np.ones((10,) * 4))
    with pytest.raises(ValueError, match="memory_limit must be"):
        cgx.contract("ab->ab", a, memory_limit="lots")


def test_an_intermediate_larger_than_the_machine_is_a_memory_error_not_an_abort():
    # 10^20 elements: without the check, the allocation would abort the process.
    v = np.ones(10**5)
    with pytest.raises(MemoryError, match="more than this machine's memory"):
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
