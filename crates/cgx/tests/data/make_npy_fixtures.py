"""Regenerates the .npy/.npz fixtures of crates/cgx/tests/cli.rs with numpy.

    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python crates/cgx/tests/data/make_npy_fixtures.py

Inputs are seeded, expected results are numpy's einsum (and hand-written gradients),
so `cgx einsum ... -o out.npy` can be checked against numpy without numpy installed.
Gradients follow the convention of `cgx einsum --grad`: the adjoint for
<a, b> = Re(conj(a) b), seeded with ones (the gradient of sum(output)) or a cotangent.
"""

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(19)


def save(name, array):
    np.save(os.path.join(HERE, name), array)


# A matrix product from two .npy files, its gradients seeded with ones and with a cotangent.
a = rng.standard_normal((3, 4))
b = rng.standard_normal((4, 2))
save("mm_a.npy", a)
save("mm_b.npy", b)
save("mm_out.npy", np.einsum("ij,jk->ik", a, b))
ones = np.ones((3, 2))
np.savez(os.path.join(HERE, "mm_grads.npz"), ones @ b.T, a.T @ ones)
cot = rng.standard_normal((3, 2))
save("mm_cot.npy", cot)
np.savez(os.path.join(HERE, "mm_grads_cot.npz"), cot @ b.T, a.T @ cot)

# A three-operand chain with a trace-like repeated label, from one .npz (arr_0, arr_1,
# arr_2); the middle operand is stored in Fortran order.
x = rng.standard_normal((2, 3))
y = np.asfortranarray(rng.standard_normal((3, 3, 4)))
z = rng.standard_normal((4, 2))
np.savez(os.path.join(HERE, "chain.npz"), x, y, z)
save("chain_out.npy", np.einsum("ij,jjk,kl->il", x, y, z))

# complex128: A x and its gradients (A: c ⊗ conj(x), x: conj(A)^T c with c = ones).
ca = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
cx = rng.standard_normal(3) + 1j * rng.standard_normal(3)
save("cz_a.npy", ca)
save("cz_x.npy", cx)
save("cz_out.npy", np.einsum("ij,j->i", ca, cx))
c = np.ones(2, dtype=complex)
np.savez(os.path.join(HERE, "cz_grads.npz"), np.einsum("i,j->ij", c, cx.conj()), np.einsum("ij,i->j", ca.conj(), c))

# Unsupported dtypes: an error naming the dtype and the file.
save("f32.npy", np.ones((3, 4), dtype=np.float32))
save("i64.npy", np.ones((4, 2), dtype=np.int64))

# A header promising 2^40 float64 values (8 TiB) and no data: refused from the header alone,
# before anything is allocated.
with open(os.path.join(HERE, "huge_header.npy"), "wb") as f:
    np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})

# numpy's semantics (issue 19, part 4): an ellipsis with broadcasting (a's batch axis of
# size 1 against b's 4) and the gradients seeded with ones, summed over the broadcast axes.
rng_bc = np.random.default_rng(4)
ba = rng_bc.standard_normal((2, 1, 2, 3))
bb = rng_bc.standard_normal((4, 3, 2))
save("bc_a.npy", ba)
save("bc_b.npy", bb)
save("bc_out.npy", np.einsum("...ij,...jk->...ik", ba, bb))
bones = np.ones((2, 4, 2, 2))
np.savez(
    os.path.join(HERE, "bc_grads.npz"),
    np.einsum("pqik,qjk->pqij", bones, bb).sum(axis=1, keepdims=True),
    np.einsum("pqij,pqik->qjk", np.broadcast_to(ba, (2, 4, 2, 3)), bones),
)
