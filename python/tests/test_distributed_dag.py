"""cgx.distributed.evaluate_dag on a LocalCluster of two worker processes: a 10^7-node
DAG of every shape cut into 4 to 8 partitions equals the single-process result bit for
bit, over a stream of batches; a worker killed mid-run costs time, not the answer.

Time: about 1 to 2 minutes on the 2-core development machine (the five 10^7-node DAGs
are prepared twice each, once in this process and once on the workers)."""

import os
import signal
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="cgx.distributed needs dask.distributed: pip install dask distributed")

from clusters import local_client  # noqa: E402

from cgx import distributed as cd  # noqa: E402
from cgx.distributed import dag  # noqa: E402
from test_distributed import RangeStarts, in_background, starts  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with local_client(distributed) as c:
        yield c


def same(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


# A different partition count per shape, 4 to 8.
PARTS = {"window": 4, "uniform": 8, "chain": 5, "layered_wide": 6, "layered_deep": 7}


@pytest.mark.parametrize("shape", dag.SHAPES)
def test_a_10_7_node_dag_cut_in_4_to_8_partitions_equals_the_single_process_result(client, shape):
    nodes = 10**7
    batches = [dag.inputs(shape, nodes, rows=2, seed=s) for s in (7, 11)]
    want = dag.evaluate_local(shape, nodes, np.concatenate(batches))
    run = cd.submit_dag(shape, nodes, batches, parts=PARTS[shape], client=client)
    try:
        got = run.result()
        infos = run.infos
    finally:
        run.release()
    assert len(got) == 2
    assert same(np.concatenate(got), want), shape
    assert [i.index for i in infos] == list(range(PARTS[shape]))
    assert len({i.pid for i in infos}) == 2, "both workers prepare partitions"
    assert sum(i.range[1] - i.range[0] for i in infos) == _node_count(shape, nodes)
    assert all(i.held >= 0 for i in infos) and sum(i.held for i in infos) == want.shape[1]


def _node_count(shape, nodes):
    from cgx import _core

    return _core.dag_size(shape, nodes)[1]


def test_a_worker_killed_mid_run_costs_time_not_the_answer(client, tmp_path):
    # 3·10^6 nodes in 6 partitions, 4 batches of 32 rows: evaluation tasks of about 0.1 s.
    # The victim is killed as soon as it starts its first evaluation; the partitions it
    # held are prepared again from their recipes where their tasks land.
    shape, nodes, parts = "window", 3 * 10**6, 6
    batches = [dag.inputs(shape, nodes, rows=32, seed=s) for s in range(4)]
    want = dag.evaluate_local(shape, nodes, np.concatenate(batches))
    log = tmp_path / "starts"
    client.register_plugin(RangeStarts(log, ("dag-eval-",)), name="dag-eval-starts")
    try:
        victim = sorted(client.run(os.getpid).items())[0][1]
        run = in_background(cd.evaluate_dag, shape, nodes, batches, parts=parts, client=client)
        deadline = time.monotonic() + 120
        while not any(pid == victim for pid, _ in starts(log)):
            assert not run.done(), "the run ended before the victim started a task"
            assert time.monotonic() < deadline, "the victim started no task in 120 s"
            time.sleep(0.005)
        os.kill(victim, signal.SIGKILL)
        killed = [key for pid, key in starts(log) if pid == victim]
        got = run.result(timeout=300)
        client.wait_for_workers(2, timeout=120)
        assert victim not in client.run(os.getpid).values()
    finally:
        client.unregister_worker_plugin("dag-eval-starts")
    assert same(np.concatenate(got), want)
    runs = starts(log)
    running = killed[-1]
    assert any(pid != victim and key == running for pid, key in runs), (running, runs)


def test_bad_input_raises_before_anything_is_sent(client):
    with pytest.raises(ValueError, match="unknown shape"):
        cd.evaluate_dag("star", 100, np.ones((1, 8)), client=client)
    with pytest.raises(ValueError, match="reads 8 inputs"):
        cd.evaluate_dag("window", 100, np.ones((1, 3)), client=client)
    with pytest.raises(ValueError, match="parts must be"):
        cd.evaluate_dag("chain", 10, np.ones((1, 1)), parts=11, client=client)
