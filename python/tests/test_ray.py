"""cgx.ray on a local Ray instance of two CPUs (127.0.0.1, no dashboard): value and gradient
against the single-process expression and numpy, with sliced labels in the output, not in
it and both, and Hessian-vector products; bad input raises like the local API; no Ray
instance is a clear error.
Skipped only when Ray is not importable."""

import threading
import warnings

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import cgx  # noqa: E402
import cgx.ray as cr  # noqa: E402
import cgx.distributed.ray as cray  # noqa: E402

# As in test_distributed: sums, stacked output blocks, and both.
NETWORKS = [
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "bc"),
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "da"),
    ("ab,bc->ac", [(6, 5), (5, 3)], "ba"),
]


def test_no_ray_instance_is_a_clear_error() -> None:
    if ray.is_initialized():
        pytest.skip("a Ray instance exists in this process")
    with pytest.raises(ValueError, match="Ray is not initialized"):
        cr.contract("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)))


@pytest.fixture(scope="module")
def local_ray():
    # Ray starts its processes by fork and exec, which JAX (imported by other test
    # modules) warns about although the child runs no Python: silenced here only.
    warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 * 2**20,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def operands(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("network", NETWORKS, ids=["summed", "in-output", "both"])
@pytest.mark.parametrize("n_tasks", [None, 1, 3])
def test_value_and_gradient_match_single_process_and_numpy(local_ray, network, n_tasks):
    eq, shapes, sliced = network
    arrays = operands(1, *shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    want = np.einsum(eq, *arrays)
    got = cr.contract(eq, *arrays, sliced_inds=sliced, n_tasks=n_tasks)
    assert got.flags.writeable
    np.testing.assert_allclose(got, expr(*arrays), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    cot = operands(2, want.shape)[0]
    value, grads = cr.value_and_grad(eq, *arrays, wrt=[0, len(arrays) - 1], cotangent=cot, sliced_inds=sliced, n_tasks=n_tasks)
    local_value, local_grads = expr.value_and_grad(*arrays, wrt=[0, len(arrays) - 1], cotangent=cot)
    np.testing.assert_allclose(value, local_value, rtol=1e-12, atol=1e-12)
    assert len(grads) == 2
    for g, w in zip(grads, local_grads):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_memory_limit_and_complex_operands(local_ray):
    eq, shapes = "ab,bc,cd->ad", [(3, 9), (9, 10), (10, 6)]
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in shapes]
    got = cr.contract(eq, *arrays, optimize=[(1, 2), (0, 1)], memory_limit=40, n_tasks=4)
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)


def test_bad_input_raises_like_the_local_api(local_ray):
    a, b = operands(4, (3, 4), (5, 2))
    with pytest.raises(ValueError) as want:
        cgx.contract("ij,jk->ik", a, b)
    with pytest.raises(ValueError) as got:
        cr.contract("ij,jk->ik", a, b)
    assert str(got.value) == str(want.value)
    expr = cgx.contract_expression("ij,jk->ik", (3, 4), (4, 3))
    with pytest.raises(ValueError) as want:
        expr.value_and_grad(a, a.T, cotangent=np.ones((2, 3)))
    with pytest.raises(ValueError) as got:
        cr.value_and_grad("ij,jk->ik", a, a.T, cotangent=np.ones((2, 3)))
    assert str(got.value) == str(want.value)


def test_the_hyper_optimizers_slicing_runs_on_ray(local_ray):
    # The plan of `cgx.HyperOptimizer(slicing_opts=...)`, sliced labels included, as the
    # local expression runs it (a ring of 10 matrices of bond 3, one open label, a target
    # of 3 elements where unsliced the least is 9).
    n, d = 10, 3
    labels = [cgx.get_symbol(i) for i in range(n)]
    eq = ",".join(labels[i] + labels[(i + 1) % n] for i in range(n)) + "->" + labels[0]
    *arrays, cot = operands(5, *[(d, d)] * n, (d,))
    opt = cgx.HyperOptimizer(max_time=None, max_repeats=8, seed=1, slicing_opts={"target_size": 3})
    expr = cgx.contract_expression(eq, *[a.shape for a in arrays], optimize=opt)
    assert expr.sliced_inds and list(expr.sliced_inds) == list(opt.sliced_inds)
    got = cr.contract(eq, *arrays, optimize=opt, n_tasks=2)
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)
    value, grads = cr.value_and_grad(eq, *arrays, wrt=[0, 4], cotangent=cot, optimize=opt, n_tasks=2)
    local_value, local_grads = expr.value_and_grad(*arrays, wrt=[0, 4], cotangent=cot)
    np.testing.assert_allclose(value, local_value, rtol=1e-12, atol=1e-12)
    for g, w in zip(grads, local_grads):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("network", NETWORKS, ids=["summed", "in-output", "both"])
@pytest.mark.parametrize("n_tasks", [None, 3])
def test_hvp_matches_single_process(local_ray, network, n_tasks):
    eq, shapes, sliced = network
    arrays = operands(4, *shapes)
    directions = operands(5, *shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    cot = operands(6, tuple(expr.output_shape))[0]
    got = cr.hvp(eq, *arrays, directions=directions, cotangent=cot, sliced_inds=sliced, n_tasks=n_tasks)
    want = cgx.contract_expression(eq, *shapes).hvp(*arrays, directions=directions, cotangent=cot)
    assert len(got) == len(arrays)
    for g, w in zip(got, want):
        assert g.flags.writeable
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_ctrl_c_ends_a_ray_run_within_a_second_and_cancels_its_tasks(local_ray, monkeypatch):
    from test_interrupt import BOUND, announcing, seconds_to_interrupt

    cancelled = []
    original = cray._cancel

    def spy(run):
        cancelled.extend(run.tasks)
        original(run)

    monkeypatch.setattr(cray, "_cancel", spy)
    submitted = threading.Event()
    monkeypatch.setattr(cray, "_run", announcing(cray._run, submitted))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3000, 3000)), rng.standard_normal((3000, 3000))
    # 3000 slices of a 3000 x 3000 outer product, in 8 ranges and a tree of sums: tens of
    # seconds of work. The signal comes a second after the run is submitted (putting the
    # operands takes seconds under load), while it is waited for.
    call = lambda: cr.contract("ij,jk->ik", a, b, sliced_inds="j", n_tasks=8)  # noqa: E731
    assert seconds_to_interrupt(call, delay=1.0, after=submitted) < BOUND
    assert len(cancelled) == 8 + 7, "every range and every sum is cancelled"
    # Cancelled tasks end (with an error) instead of running on: all done well before the
    # run's own time.
    ready, pending = ray.wait(cancelled, num_returns=len(cancelled), timeout=60)
    assert not pending, f"{len(pending)} cancelled tasks still running a minute later"
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.RayTaskError)):
        ray.get(cancelled[-1])
    # Ray still works.
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(cr.contract("ij,jk->ik", x, x.T, sliced_inds="j"), x @ x.T)


@pytest.mark.parametrize("network", NETWORKS, ids=["summed", "in-output", "both"])
def test_strip_exponent_matches_single_process(local_ray, network):
    eq, shapes, sliced = network
    rng = np.random.default_rng(4)
    ops = [rng.random(s) * 1e200 for s in shapes]  # every product of two overflows
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    wm, we = expr(*ops, strip_exponent=True)
    for mode in (True, None):  # None: the plain result is infinite, so it is rerun
        m, e = cr.contract(eq, *ops, sliced_inds=sliced, n_tasks=3, strip_exponent=mode)
        np.testing.assert_allclose(m * 10.0 ** (e - we), wm, rtol=1e-13)
    assert np.isinf(cr.contract(eq, *ops, sliced_inds=sliced, strip_exponent=False)).all()
    cot = rng.standard_normal(expr.output_shape)
    (m, e), grads = cr.value_and_grad(eq, *ops, wrt=[0, 1], cotangent=cot, sliced_inds=sliced, strip_exponent=True)
    (wm, we), want = expr.value_and_grad(*ops, wrt=[0, 1], cotangent=cot, strip_exponent=True)
    np.testing.assert_allclose(m * 10.0 ** (e - we), wm, rtol=1e-13)
    for (gm, ge), (hm, he) in zip(grads, want):
        np.testing.assert_allclose(gm * 10.0 ** (ge - he), hm, rtol=1e-13)
    (m, e), _ = ray.get(cr.submit_value_and_grad(eq, *ops, wrt=[0], cotangent=cot, sliced_inds=sliced, strip_exponent=True))
    np.testing.assert_allclose(m * 10.0 ** (e - we), wm, rtol=1e-13)
