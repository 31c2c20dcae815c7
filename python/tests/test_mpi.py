"""cgx.mpi under ``mpiexec -n 3`` on this machine: value, gradient and Hessian-vector
products (and ``strip_exponent``'s scaled ones) on the root against the single-process
expression and numpy, with sliced labels
in the output, not in it and both, more ranks than slices, and a bad input raising the
local API's exception on every rank; and Ctrl-C on mpiexec interrupting every rank's long
call within a second. Skipped only when mpi4py or ``mpiexec`` is missing."""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

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
    dirs = [rng.standard_normal(s) for s in shapes]
    products = cgx.mpi.hvp(eq, *ops, directions=dirs, cotangent=cot, sliced_inds=sliced)
    if comm.rank == 0:
        want = cgx.contract_expression(eq, *shapes).hvp(*ops, directions=dirs, cotangent=cot)
        assert len(products) == len(want)
        for h, w in zip(products, want):
            np.testing.assert_allclose(h, w, rtol=1e-10, atol=1e-12)
    else:
        assert got is None and value_grads is None and products is None
    # strip_exponent: operands of 10^200, so every product of two overflows.
    big = [rng.random(s) * 1e200 for s in shapes]
    scaled = cgx.mpi.contract(eq, *big, sliced_inds=sliced, strip_exponent=True)
    auto = cgx.mpi.contract(eq, *big, sliced_inds=sliced)
    scaled_grads = cgx.mpi.value_and_grad(eq, *big, wrt=[0, 1], cotangent=cot, sliced_inds=sliced, strip_exponent=True)
    if comm.rank == 0:
        wm, we = expr(*big, strip_exponent=True)
        for m, e in (scaled, auto):
            np.testing.assert_allclose(m * 10.0 ** (e - we), wm, rtol=1e-13)
        (m, e), grads = scaled_grads
        (wm, we), want_grads = expr.value_and_grad(*big, wrt=[0, 1], cotangent=cot, strip_exponent=True)
        np.testing.assert_allclose(m * 10.0 ** (e - we), wm, rtol=1e-13)
        for (gm, ge), (hm, he) in zip(grads, want_grads):
            np.testing.assert_allclose(gm * 10.0 ** (ge - he), hm, rtol=1e-13)
    else:
        assert scaled is None and auto is None and scaled_grads is None
# The hyper-optimizer's slicing: the root plans with it and the ranks run its slices.
n = 10
labels = [cgx.get_symbol(i) for i in range(n)]
eq = ",".join(labels[i] + labels[(i + 1) % n] for i in range(n)) + "->" + labels[0]
ops = [rng.standard_normal((3, 3)) for _ in range(n)]
opt = cgx.HyperOptimizer(max_time=None, max_repeats=8, seed=1, slicing_opts={"target_size": 3})
got = cgx.mpi.contract(eq, *ops, optimize=opt)
if comm.rank == 0:
    assert opt.sliced_inds  # the root plans, the other ranks take its plan
    np.testing.assert_allclose(got, np.einsum(eq, *ops), rtol=1e-10, atol=1e-12)
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


LIMIT = 240
"""Seconds a run may take (three ranks on two shared cores take a few)."""


def processes_with(token):
    """Ids of the processes whose environment holds ``token`` (Linux; none elsewhere)."""
    found = []
    for entry in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            if token.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError):
            pass
    return found


def run_bounded(command, env, cwd):
    """``(returncode, stdout, stderr)`` of ``command``, or a test failure after ``LIMIT``
    seconds with every process of the run ended. Hydra (MPICH's mpiexec) starts its proxy
    and each rank in a session of its own, so killing mpiexec or its process group leaves
    the ranks running and holding the output pipes (``subprocess.run``'s timeout would
    then wait on them forever). So: ``MPIEXEC_TIMEOUT`` first (Hydra and Open MPI end the
    whole job), then SIGTERM to mpiexec (which it forwards to every rank), then SIGKILL to
    every process that carries this run's token in its environment."""
    token = f"CGX_TEST_MPI_RUN={uuid.uuid4().hex}"
    env = dict(env, MPIEXEC_TIMEOUT=str(LIMIT), CGX_TEST_MPI_RUN=token.partition("=")[2])
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=LIMIT + 30)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for pid in set(processes_with(token)) | {proc.pid}:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        out, err = "", "(the output pipes stayed open)"
    pytest.fail(f"mpiexec ran over {LIMIT + 30} s; the run's processes were killed\n{out}{err}")


def test_ranks_match_single_process_and_numpy(tmp_path):
    launcher = mpiexec()
    if launcher is None:
        pytest.skip("no mpiexec (pip install mpich, or an MPI library)")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    code, out, err = run_bounded([launcher, "-n", "3", sys.executable, str(script)], env, tmp_path)
    assert code == 0, out + err
    # The ranks' lines may interleave: each rank's "ok" once.
    assert sorted(re.findall(r"ok (\d+)", out)) == ["0", "1", "2"], out + err


# Run by every rank: one long sliced call; a file per rank says when it started and when
# its KeyboardInterrupt came (wall-clock seconds, comparable across the ranks).
INTERRUPT_SCRIPT = r'''
import pathlib, sys, time
import numpy as np
from mpi4py import MPI
import cgx, cgx.mpi
import cgx.distributed.mpi as dm

comm = MPI.COMM_WORLD
out, call = pathlib.Path(sys.argv[1]), sys.argv[2]


def announced(work):
    # A rank says when its share of the slices starts: the signal must come while every
    # rank computes (a rank blocked in an MPI call sees no signal until the call returns).
    def run(*args, **kwargs):
        (out / f"ready{comm.rank}").write_text(repr(time.time()))
        return work(*args, **kwargs)
    return run


for name in ("eval_range", "grad_range", "hvp_range"):
    setattr(dm, name, announced(getattr(dm, name)))
rng = np.random.default_rng(0)
# 2000 slices of a 2000 x 2000 outer product: seconds per rank uninterrupted, each step
# of a slice short (the stop flag is read between steps).
a, b = rng.standard_normal((2000, 2000)), rng.standard_normal((2000, 2000))
cot = np.ones((2000, 2000))
run = {
    "contract": lambda: cgx.mpi.contract("ij,jk->ik", a, b, sliced_inds="j"),
    "value_and_grad": lambda: cgx.mpi.value_and_grad("ij,jk->ik", a, b, cotangent=cot, sliced_inds="j"),
    "hvp": lambda: cgx.mpi.hvp("ij,jk->ik", a, b, directions=[b.T, a.T], cotangent=cot, sliced_inds="j"),
}[call]
try:
    run()
    (out / f"done{comm.rank}").write_text(repr(time.time()))
except KeyboardInterrupt:
    (out / f"interrupted{comm.rank}").write_text(repr(time.time()))
    raise  # as a user's script would: the rank ends with the exception, and so the job
'''


@pytest.mark.parametrize("call", ["contract", "value_and_grad", "hvp"])
def test_ctrl_c_on_mpiexec_interrupts_every_rank_within_a_second(tmp_path, call):
    # Ctrl-C in the terminal reaches mpiexec, which sends SIGINT on to every rank (Hydra
    # and Open MPI both do); each rank's share of the work must raise KeyboardInterrupt
    # within the bound of test_interrupt.py, measured from the signal, and the job end.
    from test_interrupt import BOUND

    launcher = mpiexec()
    if launcher is None:
        pytest.skip("no mpiexec (pip install mpich, or an MPI library)")
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT_SCRIPT)
    token = uuid.uuid4().hex
    env = dict(os.environ, OMP_NUM_THREADS="1", CGX_TEST_MPI_RUN=token)
    command = [launcher, "-n", "2", sys.executable, str(script), str(tmp_path), call]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + LIMIT
        while len(list(tmp_path.glob("ready*"))) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.05)
        time.sleep(1.0)  # deep in the work
        sent = time.time()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # the job ends
        assert not list(tmp_path.glob("done*")), "a rank finished before the signal: make the work longer"
        caught = sorted(float((tmp_path / f"interrupted{rank}").read_text()) - sent for rank in range(2))
        assert caught[-1] < BOUND, (caught, out, err)
    finally:
        if proc.poll() is None:
            for pid in set(processes_with(token)) | {proc.pid}:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            proc.communicate()
