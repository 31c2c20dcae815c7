"""Types of ``cgx._core``, the PyO3 extension built from ``python/src`` (every function and
class its ``#[pymodule]`` in ``python/src/lib.rs`` adds, with the signatures of their
``#[pyo3(signature = ...)]``). Kept by hand beside the Rust source: a change there
changes this file, and ``mypy --strict`` over the package checks the callers.

Arguments the Rust side reads as ``Vec`` take any sequence but a string; ``Vec<char>``
takes one-character strings; numpy arrays read in place (``PyReadonlyArray``) must
already have the element type shown. ``python -m mypy.stubtest cgx._core --allowlist
python/tests/stubtest_allowlist.txt`` (CI) checks this file against the built module.
"""

import os
from collections.abc import Callable, Sequence
from typing import Any, final

import numpy as np
from numpy.typing import NDArray
from typing_extensions import Self, disjoint_base

__all__ = [
    "Expression",
    "contract",
    "_contract_checked",
    "set_memory_budget",
    "memory_budget",
    "is_path_finder",
    "release_buffers",
    "set_num_threads",
    "get_num_threads",
    "_swap_call_threads",
    "search_path",
    "hyper_search",
    "check_hyper_options",
    "tree_svg",
    "left_range",
    "any_left_range",
    "Graph",
    "Program",
    "Gradient",
    "graph_op_codes",
    "graph_workload",
    "GRAPH_OPS",
    "DagPartition",
    "dag_gather",
    "dag_inputs",
    "dag_size",
]

# Types for annotations only (the module has no such names at run time).
# A path argument: the name of one of the einsum crate's finders (``PathChoice``'s
# ``FromStr``) or pairs of positions (opt_einsum's format).
PathArg = str | Sequence[tuple[int, int]]
# Per step: positions, the labels of both operands and of the result, its size in
# elements, its multiply-adds.
Step = tuple[tuple[int, int], tuple[str, str, str], float, float]
# ``Expression._plan()``: the operands' labels, the output's, the sizes, the steps.
PlanTuple = tuple[list[str], str, dict[str, int], list[Step]]

GRAPH_OPS: list[str]

@disjoint_base
class Expression:
    """A contraction compiled once for fixed shapes (``python/src/expression.rs``)."""

    def __new__(
        cls,
        eq: str,
        shapes: Sequence[Sequence[int]],
        path: PathArg | None = None,
        memory_limit: float | None = None,
        sliced_inds: Sequence[str] | None = None,
    ) -> Self: ...
    def __call__(self, *operands: Any) -> NDArray[Any]: ...
    def _call_checked(self, *operands: Any) -> tuple[NDArray[Any], bool | None]: ...
    def _eval_slices(
        self, operands: tuple[Any, ...], start: int = 0, stop: int | None = None, blocks: bool = False
    ) -> Any: ...
    def _value_and_grad_slices(
        self,
        operands: tuple[Any, ...],
        start: int = 0,
        stop: int | None = None,
        wrt: Sequence[int] | None = None,
        cotangent: Any = None,
        blocks: bool = False,
        cotangent_first: int | None = None,
    ) -> tuple[Any, tuple[NDArray[Any], ...]]: ...
    def _grad_slices(
        self,
        operands: tuple[Any, ...],
        start: int = 0,
        stop: int | None = None,
        wrt: Sequence[int] | None = None,
        cotangent: Any = None,
    ) -> tuple[NDArray[Any], ...]: ...
    def _value_and_grad(
        self,
        operands: tuple[Any, ...],
        wrt: Sequence[int] | None = None,
        cotangent: Any = None,
        checkpoint: str | None = None,
    ) -> tuple[NDArray[Any], tuple[NDArray[Any], ...]]: ...
    def _value_and_grad_checked(
        self, operands: tuple[Any, ...], wrt: Sequence[int] | None = None, cotangent: Any = None
    ) -> tuple[NDArray[Any], tuple[NDArray[Any], ...], bool | None]: ...
    def _scaled(
        self,
        operands: tuple[Any, ...],
        grads: bool = False,
        wrt: Sequence[int] | None = None,
        cotangent: Any = None,
        fit: bool = False,
        start: int = 0,
        stop: int | None = None,
    ) -> Any: ...
    def _hvp(
        self, operands: tuple[Any, ...], directions: Sequence[Any], wrt: Sequence[int] | None = None, cotangent: Any = None
    ) -> tuple[NDArray[Any], ...]: ...
    def _hvp_slices(
        self,
        operands: tuple[Any, ...],
        directions: Sequence[Any],
        start: int = 0,
        stop: int | None = None,
        wrt: Sequence[int] | None = None,
        cotangent: Any = None,
    ) -> tuple[NDArray[Any], ...]: ...
    def _plan(self) -> PlanTuple: ...
    @property
    def sliced_inds(self) -> list[str]: ...
    @property
    def n_slices(self) -> int: ...
    @property
    def slicing_overhead(self) -> float: ...
    @property
    def eq(self) -> str: ...
    @property
    def shapes(self) -> list[list[int]]: ...
    @property
    def output_shape(self) -> list[int]: ...
    @property
    def path(self) -> list[tuple[int, int]]: ...
    @property
    def memory_limit(self) -> float | None: ...

def contract(
    eq: str,
    operands: tuple[Any, ...],
    path: PathArg | None = None,
    memory_limit: float | None = None,
    sliced_inds: Sequence[str] | None = None,
) -> NDArray[Any]: ...
def _contract_checked(eq: str, operands: tuple[Any, ...]) -> tuple[NDArray[Any], bool | None]: ...
def set_memory_budget(bytes: float | None = None) -> None: ...
def memory_budget() -> float: ...
def is_path_finder(name: str) -> bool: ...
def release_buffers() -> None: ...
def set_num_threads(n: int | None = None) -> None: ...
def get_num_threads() -> int: ...
def _swap_call_threads(n: int | None = None) -> int | None: ...
def search_path(eq: str, shapes: Sequence[Sequence[int]], method: str) -> list[tuple[int, int]]: ...
def hyper_search(
    inputs: Sequence[Sequence[int]],
    output: Sequence[int],
    sizes: Sequence[int],
    max_time: float | None = None,
    max_trials: int | None = None,
    minimize: str = "flops",
    seed: int = 0,
    reconf_size: int = 8,
    target_size: int | None = None,
    progress: Callable[[int, float, float], object] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[list[tuple[int, int]], dict[str, Any]]: ...
def check_hyper_options(
    max_time: float | None, max_trials: int | None, minimize: str, reconf_size: int, target_size: int | None
) -> None: ...
def tree_svg(eq: str, shapes: Sequence[Sequence[int]], path: Sequence[Sequence[int]], sliced: Sequence[str]) -> str: ...
def left_range(x: object) -> bool: ...
def any_left_range(arrays: list[object]) -> bool: ...

@final
class Graph:
    """A scalar DAG built in batches (``python/src/graph.rs``)."""

    def __init__(self) -> None: ...
    @property
    def num_values(self) -> int: ...
    @property
    def num_inputs(self) -> int: ...
    def inputs(self, n: int) -> NDArray[np.int64]: ...
    def constants(self, values: NDArray[np.float64]) -> NDArray[np.int64]: ...
    def add(
        self, ops: NDArray[np.int64], lhs: NDArray[np.int64], rhs: NDArray[np.int64] | None = None
    ) -> NDArray[np.int64]: ...
    def compile(self, outputs: Sequence[int]) -> Program: ...
    def gradient(self, output: int, wrt: Sequence[int] | None = None) -> Gradient: ...

@final
class Program:
    """A compiled program (``Graph.compile``)."""

    def eval(self, inputs: NDArray[np.float64]) -> NDArray[np.float64]: ...
    @property
    def num_inputs(self) -> int: ...
    @property
    def instruction_count(self) -> int: ...

@final
class Gradient:
    """A compiled value and gradient (``Graph.gradient``): a float value at one point, an
    array of values for a batch."""

    def eval(self, inputs: NDArray[np.float64]) -> tuple[float | NDArray[np.float64], NDArray[np.float64]]: ...
    @property
    def num_inputs(self) -> int: ...
    @property
    def instruction_count(self) -> int: ...

def graph_op_codes(names: Sequence[str]) -> list[int]: ...
def graph_workload(
    shape: str, nodes: int
) -> tuple[int, NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]: ...

@final
class DagPartition:
    """One prepared partition of a counter-based DAG (``cgx.distributed.dag``)."""

    def __new__(cls, shape: str, nodes: int, seed: int, parts: int, index: int) -> Self: ...
    @property
    def index(self) -> int: ...
    @property
    def parts(self) -> int: ...
    @property
    def range(self) -> tuple[int, int]: ...
    @property
    def num_inputs(self) -> int: ...
    @property
    def boundary(self) -> NDArray[np.uint64]: ...
    @property
    def exports(self) -> NDArray[np.uint64]: ...
    @property
    def held(self) -> NDArray[np.uint64]: ...
    @property
    def sources(self) -> list[int]: ...
    @property
    def operations(self) -> int: ...
    @property
    def times(self) -> tuple[float, float, float, float]: ...
    def evaluate(
        self, inputs: NDArray[np.float64], boundary: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...

def dag_gather(
    boundary: NDArray[np.uint64], sources: Sequence[tuple[NDArray[np.uint64], NDArray[np.float64]]], rows: int
) -> NDArray[np.float64]: ...
def dag_inputs(shape: str, nodes: int, seed: int, rows: int) -> NDArray[np.float64]: ...
def dag_size(shape: str, nodes: int) -> tuple[int, int, int]: ...
