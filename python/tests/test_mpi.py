"""cgx.mpi under ``mpiexec -n 3`` on this machine: value and gradient on the root against the
single-process expression and numpy, with sliced labels in the output, not in it and both,
more ranks than slices, and a bad input raising the local API's exception on every rank.
Skipped only when mpi4py or ``mpiexec`` is missing."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py")

# Run by every rank: checks on the root, the others check they got None; prints one line.
SCRIPT = r'''
import numpy as np
from mpi4py import MPI
import cgx, cgx.mpi

comm = MPI.COMM_WORLD
rng = np.random.default_rng(0)
NETWORKS = [
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "bc"),  # summed
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "da"),  # stacked output blocks
    ("ab,bc->ac", [(6, 5), (5, 3)], "ba"),              # both
    ("ab,bc->ac", [(6, 2), (2, 3)], "b"),               # fewer slices than ranks
]
for eq, shapes, sliced in NETWORKS:
    ops = [rng.standard_normal(s) for s in shapes]
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    cot = rng.standard_normal(expr.output_shape)
    got = cgx.mpi.contract(eq, *ops, sliced_inds=sliced)
    value_grads = cgx.mpi.value_and_grad(eq, *ops, wrt=[0, 1], cotangent=cot, sliced_inds=sliced)
    if comm.rank == 0:
        np.testing.assert_allclose(got, expr(*ops), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, np.einsum(eq, *ops), rtol=1e-10, atol=1e-12)
        value, grads = value_grads
        want_value, want_grads = expr.value_and_grad(*ops, wrt=[0, 1], cotangent=cot)
        np.testing.assert_allclose(value, want_value, rtol=1e-12, atol=1e-12)
        assert len(grads) == 2
        for g, w in zip(grads, want_grads):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    else:
        assert got is None and value_grads is None
a, b = np.ones((3, 4)), np.ones((5, 2))
try:
    cgx.mpi.contract("ij,jk->ik", a, b)
except ValueError as e:
    try:
        cgx.contract("ij,jk->ik", a, b)
    except ValueError as want:
        assert str(e) == str(want), (str(e), str(want))
else:
    raise AssertionError("no error")
print(f"ok {comm.rank}", flush=True)
'''


def mpiexec():
    here = pathlib.Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def test_ranks_match_single_process_and_numpy(tmp_path):
    launcher = mpiexec()
    if launcher is None:
        pytest.skip("no mpiexec (pip install mpich, or an MPI library)")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [launcher, "-n", "3", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The ranks' lines may interleave: each rank's "ok" once.
    assert sorted(re.findall(r"ok (\d+)", done.stdout)) == ["0", "1", "2"], done.stdout + done.stderr
