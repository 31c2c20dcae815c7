"""cgx.distributed.dag in one process: a counter-based DAG cut into partitions, each
prepared alone and run in order, equals the whole graph bit for bit (hypothesis over the
shape, the size, the number of partitions and the seed); a partition pickles as its
recipe; bad input is an error before anything is prepared."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgx import _core
from cgx.distributed import dag


def same(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from(dag.SHAPES),
    nodes=st.integers(1, 4000),
    parts=st.integers(1, 8),
    seed=st.integers(0, 2**64 - 1),
    rows=st.integers(1, 3),
)
def test_partitions_run_in_order_equal_the_whole_graph(shape, nodes, parts, seed, rows):
    parts = min(parts, dag.most_parts(shape, nodes))
    x = dag.inputs(shape, nodes, rows=rows, seed=seed % 1000)
    whole = dag.evaluate_local(shape, nodes, x, seed=seed)
    cut = dag.evaluate_local(shape, nodes, x, parts=parts, seed=seed)
    assert same(whole, cut), (shape, nodes, parts)
    # Row r is the DAG evaluated on row r alone.
    assert same(dag.evaluate_local(shape, nodes, x[-1], seed=seed), whole[-1:])
    assert not dag._CACHE, "evaluate_local releases its partitions"


def test_a_partition_pickles_as_its_recipe_and_is_rebuilt_where_it_lands():
    part = dag.Partition("window", 5000, 1, 3, 1)
    data = pickle.dumps(part)
    assert len(data) < 200
    back = pickle.loads(data)
    assert back == part and back.recipe() == ("window", 5000, 1, 3, 1)
    info = dag.prepare(back)
    assert info.index == 1 and info.range == (1666, 3333) and info.sources == (0,)
    assert info.boundary > 0 and len(info.exports) > 0 and info.operations > 0
    assert all(t >= 0 for t in info.times) and sum(info.times) > 0
    assert dag.prepare(back).times == (0.0, 0.0, 0.0, 0.0), "the second time it is cached"
    assert dag.forget([back.recipe()]) == 1


def test_a_partitions_boundary_is_what_earlier_ones_export():
    parts = [_core.DagPartition("uniform", 3000, 4, 3, k) for k in range(3)]
    exported = np.concatenate([parts[0].exports, parts[1].exports])
    assert set(parts[2].boundary.tolist()) <= set(exported.tolist())
    assert parts[2].sources == [0, 1]
    assert np.all(np.diff(parts[2].boundary.astype(np.int64)) > 0)


def test_bad_input_is_an_error_before_anything_is_prepared():
    with pytest.raises(ValueError, match="unknown shape"):
        dag.partitions("star", 100, 2)
    with pytest.raises(ValueError, match="parts must be 1 to 100"):
        dag.partitions("chain", 100, 101)
    with pytest.raises(ValueError, match="parts must be 1 to 10"):
        dag.partitions("layered_deep", 10_000, 11)  # 10 layers of 1000
    with pytest.raises(ValueError, match="1 to 2\\^48 nodes"):
        dag.partitions("window", 0, 1)
    with pytest.raises(ValueError, match="reads 8 inputs"):
        dag.evaluate_local("window", 100, np.ones((2, 3)))
    with pytest.raises(ValueError, match="index must be below"):
        dag.Partition("window", 100, 1, 2, 2)
    with pytest.raises(MemoryError, match="use more partitions"):
        _core.DagPartition("window", 2**40, 1, 1, 0)
    p = _core.DagPartition("chain", 100, 1, 2, 1)
    with pytest.raises(ValueError, match="boundary values have shape"):
        p.evaluate(np.ones((1, 1)), np.ones((1, 3)))
