"""Ctrl-C ends every long call within a second: a SIGINT sent from a timer thread while a
contraction, a sliced contraction, a gradient or an HVP runs raises ``KeyboardInterrupt``,
and the time from the signal to the exception is measured. (Path searches: see
test_opt_einsum_args.py; distributed runs: test_distributed.py, test_ray.py and
test_mpi.py.)

Each call is sized to run for several seconds uninterrupted on the CI machine, so a call
that ignored the signal would return normally (failing ``pytest.raises``) or take longer
than the bound."""

from collections.abc import Callable
import os
import signal
import threading
import time
from typing import Any, Optional

import numpy as np
import pytest

import cgx

# Seconds from the signal to the KeyboardInterrupt (the bound).
BOUND = 1.0
# When the signal is sent: long enough for the call to be deep in its work.
DELAY = 0.7


def seconds_to_interrupt(
    call: Callable[[], object], delay: float = DELAY, after: Optional[threading.Event] = None
) -> float:
    """Runs ``call`` with a SIGINT sent ``delay`` seconds in (counted from the moment the
    event ``after`` is set, when given: a distributed run's submission, whose time varies
    with the load); the seconds from the signal to the ``KeyboardInterrupt`` (which must
    come)."""
    sent: list[float] = []
    done = threading.Event()

    def fire() -> None:
        while after is not None and not after.wait(0.05):
            if done.is_set():
                return
        if not done.wait(delay):
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=fire)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
        caught = time.perf_counter()
    finally:
        done.set()
        timer.join()
    assert sent, "the call ended before the signal was sent"
    return caught - sent[0]


def announcing(work: Callable[..., Any], event: threading.Event) -> Callable[..., Any]:
    """``work`` that sets ``event`` once it has returned: wrapped around a distributed
    run's submission, it tells :func:`seconds_to_interrupt` (``after``) when to start
    timing the signal."""

    def run(*args: Any) -> Any:
        out = work(*args)
        event.set()
        return out

    return run


@pytest.fixture(scope="module")
def big():
    rng = np.random.default_rng(0)
    # Square operands whose product takes about 4 s on this machine, at least 3000 (cgx's
    # GEMMs use every core: 3000³ took 0.5 s on two): the signal must find the call at work.
    probe = rng.standard_normal((1000, 1000))
    start = time.perf_counter()
    cgx.contract("ij,jk->ik", probe, probe)
    rate = 1000**3 / max(time.perf_counter() - start, 1e-6)
    n = int(min(max((4.0 * rate) ** (1 / 3), 3000), 8000))
    return rng.standard_normal((n, n)), rng.standard_normal((n, n))


def test_contract_stops_on_ctrl_c(big):
    a, b = big
    assert seconds_to_interrupt(lambda: cgx.contract("ij,jk->ik", a, b)) < BOUND


def test_a_chain_of_gemms_stops_between_and_inside_them(big):
    a, b = big
    assert seconds_to_interrupt(lambda: cgx.contract("ij,jk,kl,lm->im", a, b, a, b)) < BOUND


def test_an_integer_contraction_stops_on_ctrl_c() -> None:
    # Integers are contracted by numpy (exactly, in their dtype), which does not look at
    # signals inside a call: the fallback engine cuts the 3000³ product into chunks.
    a = np.ones((3000, 3000), dtype=np.int64)
    assert seconds_to_interrupt(lambda: cgx.contract("ij,jk->ik", a, a)) < BOUND


def test_a_graph_evaluation_over_many_points_stops_on_ctrl_c() -> None:
    import cgx.graph

    # A chain of 2·10^5 sines evaluated at 2000 points: seconds uninterrupted.
    g = cgx.graph.Graph()
    x = g.inputs(1)
    n, base = 200_000, g.num_values
    chain = g.add("sin", np.concatenate([x, np.arange(base, base + n - 1)]))
    program = g.compile(chain[-1:])
    points = np.linspace(0.0, 1.0, 2000).reshape(-1, 1)
    assert seconds_to_interrupt(lambda: program.eval(points)) < BOUND
    # The program still works after the interrupt, a batch as row by row.
    rows = program.eval(points[:3])
    np.testing.assert_allclose(rows, np.stack([program.eval(p) for p in points[:3]]))


@pytest.fixture(scope="module")
def long_chain():
    import cgx.graph

    # A chain of 10^7 sines: compiling it takes seconds, its gradient tens of seconds.
    g = cgx.graph.Graph()
    x = g.inputs(1)
    n, base = 10**7, g.num_values
    chain = g.add("sin", np.concatenate([x, np.arange(base, base + n - 1)]))
    # Compiling a small output builds the fragment: the timed calls below are the passes.
    g.compile(chain[:1])
    return g, chain


def sines(x: float, n: int) -> float:
    for _ in range(n):
        x = np.sin(x)
    return x


@pytest.mark.parametrize("what", ["compile", "gradient"])
def test_compiling_a_graph_stops_on_ctrl_c(long_chain, what: str) -> None:
    g, chain = long_chain
    call = (lambda: g.compile(chain[-1:])) if what == "compile" else (lambda: g.gradient(chain[-1]))
    assert seconds_to_interrupt(call, delay=0.3) < BOUND
    # The graph still works: a short prefix compiles and evaluates.
    program = g.compile(chain[9:10])
    np.testing.assert_allclose(program.eval([0.5]), [sines(0.5, 10)], rtol=1e-15)


def test_a_dag_evaluation_stops_on_ctrl_c() -> None:
    from cgx.distributed import dag

    # Two partitions of a 10^7-node DAG prepared and run in this process: seconds.
    n = 10**7
    x = dag.inputs("window", n)
    assert seconds_to_interrupt(lambda: dag.evaluate_local("window", n, x, parts=2)) < BOUND
    # Nothing of the stopped run is kept, and a small DAG still evaluates.
    assert dag.forget([p.recipe() for p in dag.partitions("window", n, 2)]) == 0
    small = dag.inputs("window", 1000)
    np.testing.assert_array_equal(
        dag.evaluate_local("window", 1000, small, parts=2), dag.evaluate_local("window", 1000, small)
    )


def test_sliced_contract_stops_on_ctrl_c(big):
    a, b = big
    call = lambda: cgx.contract("ij,jk->ik", a, b, sliced_inds=["j"])  # noqa: E731
    assert seconds_to_interrupt(call) < BOUND


def test_value_and_grad_stops_on_ctrl_c(big):
    a, b = big
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape)
    call = lambda: expr.value_and_grad(a, b, cotangent=a)  # noqa: E731
    assert seconds_to_interrupt(call) < BOUND


def test_sliced_value_and_grad_stops_on_ctrl_c(big):
    a, b = big
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape, sliced_inds=["k"])
    call = lambda: expr.value_and_grad(a, b, cotangent=a)  # noqa: E731
    assert seconds_to_interrupt(call) < BOUND


def test_hvp_stops_on_ctrl_c(big):
    a, b = big
    expr = cgx.contract_expression("ij,jk,kl->il", a.shape, b.shape, a.shape)
    call = lambda: expr.hvp(a, b, a, directions=[a, b, a], cotangent=b)  # noqa: E731
    assert seconds_to_interrupt(call) < BOUND


def test_a_stopped_contraction_leaves_the_engine_usable(big):
    a, b = big
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape)
    assert seconds_to_interrupt(lambda: expr(a, b)) < BOUND
    # Afterwards, calls of the size that runs on a thread of its own (where Ctrl-C is
    # watched for) give whole, correct results.
    x, y = a[:700, :700].copy(), b[:700, :700].copy()
    np.testing.assert_allclose(cgx.contract("ij,jk->ik", x, y), x @ y, rtol=1e-10, atol=1e-10)
    value, (dx, dy) = cgx.contract_expression("ij,jk->ik", x.shape, y.shape).value_and_grad(x, y, cotangent=x)
    np.testing.assert_allclose(dx, x @ y.T, rtol=1e-10, atol=1e-10)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc (Linux)")
def test_nothing_stays_allocated_after_ctrl_c(big):
    a, b = big
    chain = lambda: cgx.contract("ij,jk,kl->il", a, b, a)  # noqa: E731
    cgx._core.release_buffers()
    before = rss_bytes()
    for _ in range(3):
        assert seconds_to_interrupt(chain) < BOUND
    # The intermediates (72 MB each) go back to the buffer pool, which is then emptied.
    cgx._core.release_buffers()
    grown = rss_bytes() - before
    assert grown < 30e6, f"{grown / 1e6:.0f} MB more resident after three interrupted contractions"
