"""cgx.graph: random DAGs built in batches against a plain Python interpreter of the same
node list, gradients against finite differences and against JAX, and every bad input."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import cgx
from cgx import _core
from cgx.graph import OPS, Graph

SETTINGS = settings(max_examples=100, deadline=None)
BINARY = {"add", "sub", "mul"}
# Values each operation appends: sub is neg then add, sincos is (sin, cos).
WIDTH = {"sub": 2, "sincos": 2}


@st.composite
def dags(draw, ops=OPS, max_nodes=30):
    """``(inputs, nodes, batches, outputs)``: ``nodes`` as ``(op, lhs, rhs)`` over value ids
    (each reads only earlier values), split into ``batches`` (cut points), and a few
    output ids."""
    inputs = draw(st.integers(1, 4))
    values = inputs
    nodes = []
    for _ in range(draw(st.integers(0, max_nodes))):
        op = draw(st.sampled_from(ops))
        lhs = draw(st.integers(0, values - 1))
        rhs = draw(st.integers(0, values - 1)) if op in BINARY else 0
        nodes.append((op, lhs, rhs))
        values += WIDTH.get(op, 1)
    cuts = sorted(draw(st.lists(st.integers(0, len(nodes)), max_size=3)))
    outputs = draw(st.lists(st.integers(0, values - 1), min_size=1, max_size=4))
    return inputs, nodes, cuts, outputs


def _finite_only(f):
    # math.sin(inf) raises where the engine (and numpy) give nan.
    return staticmethod(lambda a: f(a) if math.isfinite(a) else math.nan)


class Math:
    """The interpreter's operations on Python floats."""

    exp, sin, cos = staticmethod(math.exp), _finite_only(math.sin), _finite_only(math.cos)


def interpret(inputs, nodes, x, lib=Math):
    """Every value of the DAG at ``x``: inputs, then each node's values in order."""
    values = list(x[:inputs])
    for op, a, b in nodes:
        a, b = values[a], values[b]
        if op == "add":
            values.append(a + b)
        elif op == "sub":
            values.extend([-b, a + -b])
        elif op == "mul":
            values.append(a * b)
        elif op == "neg":
            values.append(-a)
        elif op == "exp":
            values.append(lib.exp(a))
        elif op == "sin":
            values.append(lib.sin(a))
        elif op == "cos":
            values.append(lib.cos(a))
        elif op == "sincos":
            values.extend([lib.sin(a), lib.cos(a)])
    return values


def build(inputs, nodes, cuts, compile_between=True):
    """The DAG built batch by batch (compiling between batches, so later batches go to
    new fragments); checks the ids ``add`` returns."""
    g = Graph()
    x = g.inputs(inputs)
    assert x.tolist() == list(range(inputs))
    expected = inputs
    for lo, hi in zip([0, *cuts], [*cuts, len(nodes)]):
        batch = nodes[lo:hi]
        if not batch:
            continue
        ops, lhs, rhs = zip(*batch)
        ids = g.add(list(ops), np.array(lhs), np.array(rhs))
        want = []
        for op in ops:
            want.append(expected + (1 if op == "sub" else 0))
            expected += WIDTH.get(op, 1)
        assert ids.tolist() == want
        if compile_between:
            g.compile([g.num_values - 1])
    assert g.num_values == expected
    return g


@SETTINGS
@given(dag=dags(ops=[o for o in OPS if o != "exp"]), seed=st.integers(0, 2**32 - 1))
def test_random_dags_match_the_interpreter(dag, seed):
    inputs, nodes, cuts, outputs = dag
    g = build(inputs, nodes, cuts)
    prog = g.compile(outputs)
    rng = np.random.default_rng(seed)
    points = rng.uniform(-2, 2, size=(3, inputs))
    want = np.array([[interpret(inputs, nodes, p)[o] for o in outputs] for p in points])
    # The same f64 operations in the same order: equal up to the libm's last bit.
    np.testing.assert_allclose(prog.eval(points[0]), want[0], rtol=1e-13, atol=0)
    np.testing.assert_allclose(prog.eval(points), want, rtol=1e-13, atol=0)
    assert prog.eval(points).shape == (3, len(outputs))


@SETTINGS
@given(dag=dags(), seed=st.integers(0, 2**32 - 1))
def test_exp_dags_match_the_interpreter(dag, seed):
    # With exp, values can overflow; compare where the reference is finite.
    inputs, nodes, cuts, outputs = dag
    prog = build(inputs, nodes, cuts, compile_between=False).compile(outputs)
    x = np.random.default_rng(seed).uniform(-1, 1, size=inputs)
    with np.errstate(all="ignore"):
        try:
            want = np.array([interpret(inputs, nodes, x)[o] for o in outputs])
        except OverflowError:
            return
    got = prog.eval(x)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=0)


@SETTINGS
@given(dag=dags(ops=[o for o in OPS if o != "exp"], max_nodes=20), seed=st.integers(0, 2**32 - 1))
def test_gradients_match_finite_differences(dag, seed):
    inputs, nodes, cuts, outputs = dag
    g = build(inputs, nodes, cuts)
    out = outputs[0]
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=inputs)
    value, grad = g.gradient(out).eval(x)
    f = lambda p: interpret(inputs, nodes, p)[out]  # noqa: E731
    # Random DAGs can overflow (a chain of doublings, then squarings): keep the tame ones.
    assume(abs(value) < 1e6 and np.all(np.abs(grad) < 1e6))
    assert value == pytest.approx(f(x), rel=1e-13, abs=0)
    assert grad.shape == (inputs,)
    # Central difference along a random direction, h = 1e-6 in float64 (PyTorch gradcheck's step).
    t = rng.standard_normal(inputs)
    h = 1e-6
    fd = (f(x + h * t) - f(x - h * t)) / (2 * h)
    scale = max(1.0, abs(value))
    assert abs(grad @ t - fd) <= 1e-5 * scale + 1e-3 * abs(fd), (grad @ t, fd)


def jax_interpreter():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    class Jnp:
        exp, sin, cos = jnp.exp, jnp.sin, jnp.cos

    return jax, jnp, Jnp


@settings(max_examples=40, deadline=None)
@given(dag=dags(max_nodes=25), seed=st.integers(0, 2**32 - 1))
def test_gradients_match_jax(dag, seed):
    jax, jnp, Jnp = jax_interpreter()
    inputs, nodes, cuts, outputs = dag
    g = build(inputs, nodes, cuts)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=inputs)
    wrt = sorted(set(rng.integers(0, inputs, size=inputs).tolist()))
    out = outputs[-1]

    def f(xs):
        return interpret(inputs, nodes, xs, Jnp)[out] + 0.0 * xs[0]

    with np.errstate(all="ignore"):
        want_value = float(f(jnp.asarray(x)))
        want = np.asarray(jax.grad(f)(jnp.asarray(x)))[wrt]
    value, grad = g.gradient(out, wrt=wrt).eval(x)
    if not np.isfinite(want_value):
        return
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    finite = np.isfinite(want)
    np.testing.assert_allclose(grad[finite], want[finite], rtol=1e-10, atol=1e-12)


def test_a_batch_of_points_is_row_by_row() -> None:
    g = Graph()
    x = g.inputs(3)
    p = g.add(["mul", "add"], [x[0], x[1]], [x[1], x[2]])
    s = g.add("sincos", p[:1])
    q = g.add("sub", [s[0] + 1], [p[1]])
    grad = g.gradient(q[0])
    pts = np.random.default_rng(1).standard_normal((5, 3))
    values, grads = grad.eval(pts)
    assert values.shape == (5,) and grads.shape == (5, 3)
    for k in range(5):
        v, gr = grad.eval(pts[k])
        assert isinstance(v, float) and v == values[k]
        np.testing.assert_array_equal(gr, grads[k])
        a, b, c = pts[k]
        # q = cos(a b) - (b + c)
        assert v == pytest.approx(math.cos(a * b) - (b + c), rel=1e-14)
        np.testing.assert_allclose(gr, [-math.sin(a * b) * b, -math.sin(a * b) * a - 1, -1], rtol=1e-13)


def test_batches_of_no_points_keep_their_columns() -> None:
    g = Graph()
    x = g.inputs(2)
    y = g.add("mul", x[:1], x[1:])
    none = np.zeros((0, 2))
    assert g.compile([y[0], y[0], x[0]]).eval(none).shape == (0, 3)
    values, grads = g.gradient(y[0]).eval(none)
    assert values.shape == (0,) and grads.shape == (0, 2)


def test_constants_inputs_and_symbolic_zeros() -> None:
    g = Graph()
    x = g.inputs(2)
    c = g.constants([1.5, -2.0])
    y = g.add("mul", c[:1], x[:1])  # 1.5 x0; x1 unused
    v, gr = g.gradient(y[0]).eval([4.0, 7.0])
    assert v == 6.0 and gr.tolist() == [1.5, 0.0]
    # An input as output, and its gradient with respect to itself.
    v, gr = g.gradient(x[1], wrt=[x[1], x[0]]).eval([4.0, 7.0])
    assert v == 7.0 and gr.tolist() == [1.0, 0.0]
    # A constant output: no input is read.
    v, gr = g.gradient(c[1]).eval([4.0, 7.0])
    assert v == -2.0 and gr.tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(g.compile(c).eval([0.0, 0.0]), [1.5, -2.0])


def test_the_graph_grows_after_compiling() -> None:
    g = Graph()
    x = g.inputs(1)
    y = g.add("sin", x)
    first = g.compile(y)
    z = g.inputs(1)
    w = g.add("mul", y, z)
    assert first.num_inputs == 1 and first.eval([0.5]).tolist() == [math.sin(0.5)]
    second = g.compile([w[0], y[0]])
    assert second.num_inputs == 2
    np.testing.assert_allclose(second.eval([0.5, 3.0]), [3 * math.sin(0.5), math.sin(0.5)], rtol=1e-15)
    # Equal operations are merged: sin(x) added again costs no instruction.
    again = g.add("sin", x)
    assert g.compile([again[0], y[0]]).instruction_count == 1


def test_an_empty_batch_adds_nothing() -> None:
    g = Graph()
    g.inputs(1)
    assert g.add([], [], []).tolist() == [] and g.num_values == 1


def test_integer_codes_and_names_agree() -> None:
    g = Graph()
    x = g.inputs(2)
    by_name = g.add(["add", "mul", "sub"], [x[0]] * 3, [x[1]] * 3)
    by_code = g.add(np.array([OPS.index("add"), OPS.index("mul"), OPS.index("sub")], dtype=np.uint8), [x[0]] * 3, [x[1]] * 3)
    p = g.compile(np.concatenate([by_name, by_code]))
    out = p.eval([3.0, 5.0])
    assert out.tolist() == [8.0, 15.0, -2.0] * 2
    # Structurally equal: merged.
    assert p.instruction_count == 4


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda g, x: g.add(["log"], x[:1]), "unknown operation `log`"),
        (lambda g, x: g.add(np.array([9]), x[:1]), "code 9"),
        (lambda g, x: g.add(np.array([-1]), x[:1]), "code -1"),
        (lambda g, x: g.add("sin", [5]), "lhs 5 is not an earlier value"),
        (lambda g, x: g.add("sin", [-1]), "lhs -1 is not an earlier value"),
        (lambda g, x: g.add(["sin", "add"], [0, 0], [0, 4]), "operation 1 of the batch (add): rhs 4"),
        (lambda g, x: g.add(["sin", "sin"], [0, 3]), "lhs 3 is not an earlier value"),
        (lambda g, x: g.add("add", x[:1]), "is binary but no rhs"),
        (lambda g, x: g.add("add", x, x[:1]), "one entry per operation"),
        (lambda g, x: g.add("sin", [0.5]), "integer ids"),
        (lambda g, x: g.compile([2]), "output 2 is not a value of this graph (it has 2 values)"),
        (lambda g, x: g.gradient(7), "output 7 is not a value"),
        (lambda g, x: g.gradient(x[0], wrt=[9]), "wrt value 9 is not a value"),
        (lambda g, x: g.compile(x).eval([1.0]), "the program reads 2 inputs"),
        (lambda g, x: g.compile(x).eval(np.ones((2, 3))), "the program reads 2 inputs"),
        (lambda g, x: g.gradient(x[0]).eval(np.ones((1, 2, 2))), "the program reads 2 inputs"),
        (lambda g, x: g.inputs(-1), "must not be negative"),
        (lambda g, x: g.inputs(2**64 - 1), "a graph holds at most 2147483648 values: it has 2"),
        (lambda g, x: g.inputs(2**70), "a graph holds at most 2147483648 values"),
        (lambda g, x: g.inputs(2**31 - 1), "a graph holds at most 2147483648 values"),
        (lambda g, x: g.gradient(-1), "output -1 is not a value"),
        (lambda g, x: g.gradient(2**70), "integer ids"),
        (lambda g, x: g.gradient(x[0], wrt=[-1]), "wrt value -1 is not a value"),
    ],
)
def test_bad_input_raises_value_error(call, message):
    g = Graph()
    x = g.inputs(2)
    with pytest.raises(ValueError) as e:
        call(g, x)
    assert message in str(e.value)
    assert g.num_values == 2  # a failed batch adds nothing


def test_sizes_beyond_memory_raise_memory_error_not_abort() -> None:
    # 2^31 inputs: the most a graph holds, but more memory than any test machine has.
    g = Graph()
    with pytest.raises(MemoryError, match="a graph of 2147483648 values needs about"):
        g.inputs(2**31)
    assert g.num_values == 0
    # 10^12 points of a program without inputs: a batch of no columns is free in numpy,
    # its outputs (8 TB) are not.
    c = g.constants([2.0])
    prog = g.compile(c)
    with pytest.raises(MemoryError, match="the outputs of 1000000000000 points"):
        prog.eval(np.empty((10**12, 0)))
    # No outputs: nothing to compute, at once.
    assert g.compile([]).eval(np.empty((10**12, 0))).shape == (10**12, 0)
    # A broadcast view of 10^12 points copied by the extension (cgx.graph itself asks
    # numpy for a contiguous copy, which numpy refuses with its own MemoryError).
    x = g.inputs(1)
    prog = g.compile(g.add("sin", x))
    huge = np.broadcast_to(np.zeros((1, 1)), (10**12, 1))
    with pytest.raises(MemoryError, match=r"a copy of the inputs of shape \[1000000000000, 1\]"):
        prog._p.eval(huge)
    with pytest.raises(MemoryError):
        prog.eval(huge)
    assert g.num_values == 3


def test_a_gradient_batch_over_memory_raises_memory_error() -> None:
    # Gradients with respect to 1024 inputs of which 1023 are zero: 1024 points give 8 MiB
    # of gradients but only 8 KiB of program outputs.
    g = Graph()
    x = g.inputs(1024)
    grad = g.gradient(g.add("exp", x[:1])[0])
    points = np.zeros((1024, 1024))
    value, dx = grad.eval(points)
    assert dx.shape == (1024, 1024) and (dx[:, 0] == 1).all() and (dx[:, 1:] == 0).all()
    _core.set_memory_budget(4 << 20)  # a budget of 4 MiB
    try:
        with pytest.raises(MemoryError, match="the gradients of 1024 points .1024 per point. needs 8388608 bytes"):
            grad.eval(points)
    finally:
        _core.set_memory_budget(None)


def test_wrt_must_be_an_input() -> None:
    g = Graph()
    x = g.inputs(1)
    y = g.add("sin", x)
    with pytest.raises(ValueError, match="wrt value 1 is not an input"):
        g.gradient(y[0], wrt=y)


def test_a_failed_batch_adds_nothing_midway() -> None:
    g = Graph()
    x = g.inputs(1)
    with pytest.raises(ValueError):
        g.add(["sin", "cos", "add"], [0, 1, 2], [0, 0, 7])
    assert g.num_values == 1
    assert g.add("cos", x).tolist() == [1]


def test_the_bench_workload_is_the_rust_one() -> None:
    inputs, ops, lhs, rhs, outputs, values = cgx._core.graph_workload("window", 2000)
    g = Graph()
    g.inputs(inputs)
    ids = g.add(ops, lhs, rhs)
    assert len(ids) == 2000 and len(values) == inputs
    names = [OPS[c] for c in ops]
    nodes = list(zip(names, lhs.tolist(), rhs.tolist()))
    want = interpret(inputs, nodes, values.tolist())
    np.testing.assert_allclose(g.compile(outputs).eval(values), [want[o] for o in outputs], rtol=1e-12)
