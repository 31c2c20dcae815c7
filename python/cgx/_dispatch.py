"""Arrays of other libraries: contracted by their own library, along the engine's path.

opt_einsum contracts a JAX array with ``jax.numpy.einsum``, a PyTorch tensor with
``torch.einsum``, a Dask array with ``dask.array.einsum`` and so on, pair by pair along
its path, so the result is of the operands' own type (traceable by ``jax.jit`` and
``jax.grad``, on the tensors' device, lazy for Dask). cgx does the same along the
engine's plan (its pairwise steps, its first sums), which is what makes ``cgx.contract`` a
drop-in for code written against those libraries. The engine itself computes on the host
in double precision; for engine-computed JAX and PyTorch contractions with the engine's
gradients there are ``cgx.jax.contract`` and ``cgx.torch.contract``.

``backend=`` names the library as opt_einsum does (``'jax'``, ``'torch'``, ``'dask'``,
``'tensorflow'``, ``'cupy'``, ...): numpy operands are converted to its arrays, contracted
there and converted back to numpy (opt_einsum's behaviour for numpy input); ``'object'``
contracts numpy object arrays with Python's ``+`` and ``*`` (numpy along the path, in
``_numpy``). This module knows nothing of the engine: it takes the plan's steps, as
``Expression._plan`` gives them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

# Array modules whose arrays are numpy's own, or Python's numbers and lists.
_NATIVE = ("numpy", "builtins")

# opt_einsum's names for a library, by the top-level module its array types live in.
_ALIASES = {"jaxlib": "jax", "tensorflow": "tensorflow", "torch": "torch", "dask": "dask"}

# The module whose ``einsum`` and ``asarray`` serve a backend name, where it is not the
# backend's own top-level module.
_MODULES = {"jax": "jax.numpy", "dask": "dask.array", "autograd": "autograd.numpy"}


# The common operand types, told apart without reading their module: this runs on every
# call of `cgx.contract`, whose whole overhead on a small product is a few microseconds.
_NATIVE_TYPES = frozenset((np.ndarray, float, int, complex, list, tuple))


def foreign(operands: Iterable[Any]) -> str | None:
    """The backend name of the first operand that is not a numpy array or a Python number
    and whose library has an ``einsum`` (``'jax'`` for ``jaxlib``'s and JAX tracers'
    types), or ``None`` if there is none: other objects (a pandas frame, say) go to the
    engine through ``numpy.asarray``, as before."""
    for x in operands:
        t = type(x)
        if t in _NATIVE_TYPES:
            continue
        top = t.__module__.partition(".")[0]
        if top in _NATIVE:
            continue
        name = _ALIASES.get(top, top)
        if _has_einsum(name):
            return name
    return None


# Whether a library has an `einsum`, by backend name (looked up once per name).
_EINSUM: dict[str, bool] = {}


def _has_einsum(name: str) -> bool:
    known = _EINSUM.get(name)
    if known is None:
        try:
            known = hasattr(importlib.import_module(_MODULES.get(name, name)), "einsum")
        except ImportError:
            known = False
        _EINSUM[name] = known
    return known


def library(operands: Iterable[Any], backend: Any) -> str | None:
    """The array library that contracts ``operands``: ``None`` for the engine (numpy
    arrays, Python numbers, ``backend='numpy'``), ``'object'`` for numpy's object arrays
    with Python arithmetic, else the library ``backend`` names, or with ``'auto'`` the
    library of the first operand that is not numpy's (``_dispatch``)."""
    if not isinstance(backend, str):
        raise ValueError(f"backend must be a library's name, such as 'numpy', 'jax', 'torch' or 'object', not {backend!r}")
    if backend == "auto":
        return foreign(operands)
    return None if backend == "numpy" else backend


class Backend:
    """A library's ``einsum`` and its conversions from and to numpy."""

    def __init__(self, name: str) -> None:
        self.name = name
        try:
            self.module = importlib.import_module(_MODULES.get(name, name))
        except ImportError as e:
            raise ValueError(f"backend={name!r}: the module {_MODULES.get(name, name)!r} cannot be imported ({e})") from None
        if not hasattr(self.module, "einsum"):
            raise ValueError(f"backend={name!r}: the module {self.module.__name__!r} has no einsum")

    def to(self, x: Any) -> Any:
        """``x`` as this library's array (a numpy operand, or a constant of an expression)."""
        if self.name == "torch":
            import numpy as np

            return self.module.as_tensor(np.asarray(x)) if not isinstance(x, self.module.Tensor) else x
        return self.module.asarray(x)

    def back(self, x: Any) -> Any:
        """This library's array as a numpy array."""
        import numpy as np

        if self.name == "torch":
            return x.detach().cpu().numpy()
        if self.name == "dask":
            return np.asarray(x.compute())
        return np.asarray(x)

    def along(self, plan: Any, arrays: Iterable[Any]) -> Any:
        """``arrays`` contracted with this library's ``einsum`` along ``plan``
        (``(inputs, output, sizes, steps)`` of ``Expression._plan``); one operand without
        steps is copied by ``einsum`` as it stands."""
        inputs, output, _, steps = plan
        ops = list(arrays)
        einsum = self.module.einsum
        if not steps:
            term = _letters(inputs[0] + output)
            return einsum(f"{term(inputs[0])}->{term(output)}", ops[0])
        for (i, j), (a, b, r), _, _ in steps:
            term = _letters(a + b + r)
            if i == j:
                result = einsum(f"{term(a)}->{term(r)}", ops[i])
            else:
                result = einsum(f"{term(a)},{term(b)}->{term(r)}", ops[i], ops[j])
            for p in sorted({i, j}, reverse=True):
                del ops[p]
            ops.append(result)
        return ops[0]


def _letters(labels: str) -> Callable[[str], str]:
    """A renaming of a step's labels to ASCII letters, which every library's einsum reads."""
    names: dict[str, str] = {}
    for c in labels:
        if c not in names:
            k = len(names)
            if k >= 52:
                raise ValueError(f"a step with more than 52 labels: other libraries' einsum reads at most 52 ({labels!r})")
            names[c] = chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26)
    return lambda t: "".join(names[c] for c in t)


_CACHE: dict[str, Backend] = {}


def backend(name: str) -> Backend:
    """The :class:`Backend` of ``name``, made once."""
    b = _CACHE.get(name)
    if b is None:
        b = _CACHE[name] = Backend(name)
    return b


def run(plan: Any, operands: Sequence[Any], name: str, convert: bool) -> Any:
    """``operands`` contracted by library ``name`` along ``plan``. With ``convert`` (the
    operands are numpy's, the library was asked for by ``backend=``), they are converted
    to its arrays first and the result back to numpy; otherwise numpy operands among
    foreign ones (constants, say) are converted and the result stays the library's."""
    b = backend(name)
    arrays = [x if foreign([x]) == name else b.to(x) for x in operands]
    out = b.along(plan, arrays)
    return b.back(out) if convert else out
