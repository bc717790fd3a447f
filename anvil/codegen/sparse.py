"""`SparseNumericalFunction`: a function whose output is the nonzeros of a fixed CSC sparsity pattern."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray
from tinygrad import Tensor

from anvil.codegen.decorator import shapes_to_args
from anvil.codegen.function import Array, InputsLike, NumericalFunction
from anvil.codegen.trace import OutputSpec
from anvil.validation import tensor_data

#: The API reference's spelling of a pattern: (rows, cols), the number of nonzeros, CSC row indices, column starts.
CSC_PARTS = ("shape", "nnz", "indices", "indptr")


def _pattern(name: str, pattern: Any) -> tuple[tuple[int, int], NDArray[np.int32], NDArray[np.int32]]:
  if isinstance(pattern, tuple) and len(pattern) == 3 and not sp.issparse(pattern):
    shape, indices, indptr = pattern
  elif sp.issparse(pattern):
    csc = sp.csc_array(pattern)
    csc.sort_indices()
    shape, indices, indptr = csc.shape, csc.indices, csc.indptr
  else:
    raise TypeError(f"{name}: pattern must be a scipy sparse matrix/array or (shape, indices, indptr)")
  rows, cols = (int(s) for s in shape)
  indices, indptr = np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)
  if rows < 0 or cols < 0 or indptr.shape != (cols + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
    raise ValueError(f"{name}: indptr must have cols + 1 = {cols + 1} non-decreasing entries starting at 0")
  if indices.shape != (int(indptr[-1]),) or np.any(indices < 0) or (np.any(indices >= max(rows, 1)) and indices.size):
    raise ValueError(f"{name}: indices must hold indptr[-1] row indices in [0, {rows})")
  for j in range(cols):
    col = indices[indptr[j] : indptr[j + 1]]
    if np.any(np.diff(col) <= 0):
      raise ValueError(f"{name}: row indices of column {j} must be strictly increasing")
  if max(rows, cols, indices.size) >= 2**31:
    raise ValueError(f"{name}: pattern too large for 32-bit indices")
  return (rows, cols), indices.astype(np.int32), indptr.astype(np.int32)


def _index_array(name: str, what: str, value: Any) -> NDArray[np.int64]:
  """A CSC index array given as a Tensor of data, a list or a numpy array."""
  arr = np.asarray(tensor_data(name, what, value))
  if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
    raise TypeError(f"{name}: {what}: expected a 1-D array of integers, got {arr.dtype} of shape {arr.shape}")
  return arr.astype(np.int64)


def _csc_pattern(name: str, given: dict[str, Any]) -> tuple[Any, NDArray[np.int64], NDArray[np.int64]]:
  """(shape, indices, indptr) from the API reference's (shape, nnz, indices, indptr), with nnz checked."""
  if missing := [k for k in CSC_PARTS if given.get(k) is None]:
    raise TypeError(f"{name}: a pattern given as shape, nnz, indices, indptr lacks {', '.join(missing)}")
  indices, indptr = _index_array(name, "indices", given["indices"]), _index_array(name, "indptr", given["indptr"])
  nnz = given["nnz"]
  if isinstance(nnz, bool) or not isinstance(nnz, (int, np.integer)) or nnz != indices.size:
    raise ValueError(f"{name}: nnz = {nnz!r}, but indices holds {indices.size} row indices")
  return given["shape"], indices, indptr


def pattern_arguments(name: str, pattern: Any, csc: tuple[Any, ...], keywords: dict[str, Any]) -> tuple[Any, Any]:
  """The pattern (as `_pattern` takes it) and any device given positionally, from either spelling: `pattern[,
  device]`, or the API reference's `shape, nnz, indices, indptr` (positional from the pattern's place, or keywords)."""
  given = {k: v for k, v in keywords.items() if v is not None}
  if not given and len(csc) <= 1:
    return pattern, (csc[0] if csc else None)
  positional = ([] if pattern is None else [pattern]) + list(csc)
  if len(positional) > len(CSC_PARTS):
    raise TypeError(f"{name}: expected a pattern, or shape, nnz, indices, indptr; got {len(positional)} arguments")
  parts = dict(zip(CSC_PARTS, positional, strict=False))
  if twice := sorted(set(parts) & set(given)):
    raise TypeError(f"{name}: {', '.join(twice)} given both by position and by keyword")
  return _csc_pattern(name, parts | given), None


class SparseNumericalFunction(NumericalFunction[..., Any]):
  """A `NumericalFunction` whose single output holds the nonzeros of a CSC matrix with a fixed pattern.

  Calling it returns a `scipy.sparse.csc_array`. The generated header exposes the pattern as `static constexpr`
  members of the function's namespace: `rows`, `cols`, `nnz`, `innerIndices[]` (row index of each nonzero) and
  `outerStarts[]` (cols + 1 column starts).

  Args:
    name: a C++ identifier.
    fn: returns a 1-D Tensor of the nnz values, in CSC order (column by column, rows increasing).
    inputs: one `Arg` per parameter of `fn`.
    pattern: a scipy sparse matrix/array (its structure is used) or `(shape, indices, indptr)`. The API reference's
      spelling is accepted too: `shape, nnz, indices, indptr` in its place (positional or keywords; indices and
      indptr as lists, numpy arrays or Tensors of data; nnz checked against them).
    device: "CPU" (or "CUDA"; positional after the pattern too).
    gather: optional index table, one entry per nonzero: `fn` then returns a compressed vector and nonzero k is
      `fn(...)[gather[k]]`, expanded in C++ (this is how compressed sparse derivatives are evaluated).
    gather_shift: with `gather`, a constant per nonzero added after the gather (finite; default none).

  Attributes:
    constant_entries: each stored entry's value where it is the same at every point, NaN where it varies, as
      `spjacobian` finds them at trace time; None where unknown (a function made by hand).

  Calls are thread-safe, as a `NumericalFunction`'s: each result is a new csc_array over fresh values.

  Example:
    >>> pattern = scipy.sparse.csc_array(np.eye(3))
    >>> D = SparseNumericalFunction("D", lambda x: x * 2, Arg(3), pattern)
    >>> D(np.ones(3)).toarray()
    >>> E = SparseNumericalFunction("E", lambda x: x * 2, (Arg(3),), (3, 3), 3, [0, 1, 2], [0, 1, 2, 3])
  """

  def __init__(
    self,
    name: str,
    fn: Callable[..., Any],
    inputs: InputsLike,
    pattern: Any = None,
    *csc: Any,
    shape: Any = None,
    nnz: int | None = None,
    indices: Any = None,
    indptr: Any = None,
    device: str = "CPU",
    gather: ArrayLike | None = None,
    gather_shift: ArrayLike | None = None,
  ) -> None:
    keywords = {"shape": shape, "nnz": nnz, "indices": indices, "indptr": indptr}
    pattern, positional_device = pattern_arguments(name, pattern, csc, keywords)
    device = positional_device or device
    self.shape, self.indices, self.indptr = _pattern(name, pattern)
    self.gather = None if gather is None else np.asarray(gather, dtype=np.int64)
    if self.gather is not None and (self.gather.shape != (self.nnz,) or np.any(self.gather < 0)):
      raise ValueError(f"{name}: gather must hold one non-negative index per nonzero ({self.nnz})")
    self.gather_shift = None if gather_shift is None else np.asarray(gather_shift, dtype=np.float64)
    if self.gather_shift is not None and (
      self.gather is None or self.gather_shift.shape != (self.nnz,) or not np.isfinite(self.gather_shift).all()
    ):
      raise ValueError(f"{name}: gather_shift must hold one finite value per nonzero ({self.nnz}), with gather")
    super().__init__(name, fn, inputs, device)
    self.constant_entries: NDArray[np.float64] | None = None
    self.compressed_fn = fn
    if self.gather is not None:
      # NOTE: `fn` keeps the meaning "returns the nnz values" for composing and differentiating again (a tinygrad
      # gather); the generated code computes `compressed_fn` and expands it with a table instead.
      index = Tensor(self.gather.astype(np.int32))
      shift = None if self.gather_shift is None else Tensor(self.gather_shift)
      self.fn = lambda *xs: _shifted(self.compressed_fn(*xs).flatten()[index], shift)

  @property
  def is_sparse(self) -> bool:
    """True: the output is a sparse matrix."""
    return True

  @property
  def nnz(self) -> int:
    """Number of stored entries."""
    return int(self.indptr[-1])

  @property
  def _key_extra(self) -> str:
    gather = "" if self.gather is None else self.gather.tobytes().hex()
    shift = "" if self.gather_shift is None else self.gather_shift.tobytes().hex()
    return f"{self.shape}|{self.indices.tobytes().hex()}|{self.indptr.tobytes().hex()}|{gather}|{shift}"

  @property
  def _traced_fn(self) -> Callable[..., Any]:
    return self.compressed_fn

  @property
  def _gathers(self) -> dict[int, Sequence[int]]:
    return {} if self.gather is None else {0: self.gather.tolist()}

  @property
  def _gather_shifts(self) -> dict[int, Sequence[float]]:
    return {} if self.gather_shift is None else {0: self.gather_shift.tolist()}

  @property
  def outputs(self) -> tuple[OutputSpec, ...]:
    """The single output: the nnz values."""
    return (OutputSpec((self.nnz,), super().outputs[0].dtype),)

  def _check_outputs(self, outputs: tuple[OutputSpec, ...]) -> None:
    if self.gather is not None:
      if len(outputs) != 1 or len(outputs[0].shape) != 1 or (self.nnz and outputs[0].size <= self.gather.max()):
        got = ", ".join(str(o.shape) for o in outputs)
        raise ValueError(
          f"{self.name}: with gather, the function must return one vector longer than max(gather), got {got}"
        )
      return
    if len(outputs) != 1 or outputs[0].shape != (self.nnz,):
      got = ", ".join(str(o.shape) for o in outputs)
      raise ValueError(
        f"{self.name}: a sparse function must return one vector of the nnz = {self.nnz} values, got {got}"
      )

  def _extra_declarations(self) -> tuple[str, ...]:
    size = max(self.nnz, 1)
    inner = ", ".join(map(str, self.indices)) if self.nnz else "0"
    return (
      f"static constexpr int rows = {self.shape[0]};",
      f"static constexpr int cols = {self.shape[1]};",
      f"static constexpr int nnz = {self.nnz};",
      f"static constexpr int innerIndices[{size}] = {{{inner}}};" + ("  // empty pattern" if not self.nnz else ""),
      f"static constexpr int outerStarts[{self.shape[1] + 1}] = {{{', '.join(map(str, self.indptr))}}};",
    )

  @property
  def _wrap_outputs(self) -> Callable[[Array], sp.csc_array]:
    return _csc_builder(self.shape, self.indices, self.indptr)

  def __call__(self, *args: ArrayLike, **kwargs: Any) -> sp.csc_array:
    """Evaluate; returns a `scipy.sparse.csc_array` with this function's pattern."""
    return super().__call__(*args, **kwargs)


def _csc_builder(
  shape: tuple[int, int], indices: NDArray[np.int32], indptr: NDArray[np.int32]
) -> Callable[[Array], sp.csc_array]:
  """A fast constructor of csc_arrays with this fixed pattern.

  NOTE: scipy's constructor validates the pattern on every call (~12 µs, ten times a small function's call); the
  pattern is fixed and valid, so results are cloned from a validated template (~1 µs). This relies on csc_array
  keeping its state in its instance dict, which is checked here; otherwise the public constructor is used.
  """
  template = sp.csc_array((np.zeros(indices.size), indices, indptr), shape=shape)
  template.has_sorted_indices = True

  def build(values: Array) -> sp.csc_array:
    m = sp.csc_array.__new__(sp.csc_array)
    m.__dict__.update(template.__dict__)
    m.data, m.indices, m.indptr = values, indices.copy(), indptr.copy()
    return m

  probe = build(np.arange(1.0, indices.size + 1.0))
  official = sp.csc_array((np.arange(1.0, indices.size + 1.0), indices, indptr), shape=shape)
  if probe.shape == official.shape and (probe != official).nnz == 0 and set(template.__dict__) >= {"data", "indices"}:
    return build
  return lambda values: sp.csc_array((values, indices.copy(), indptr.copy()), shape=shape)


def sparse_numerical_function(
  name: str,
  pattern: Any = None,
  *shapes: Any,
  inputs: Any = None,
  shape: Any = None,
  nnz: int | None = None,
  indices: Any = None,
  indptr: Any = None,
  device: str = "CPU",
) -> Callable[[Callable[..., Any]], SparseNumericalFunction]:
  """Decorator building a `SparseNumericalFunction`: `(name, pattern, *shapes)` with float64 inputs of the given
  shapes, or the API reference's `(name, inputs, shape, nnz, indices, indptr)` (inputs: Args or shapes).

  Example:
    >>> @sparse_numerical_function("D", scipy.sparse.eye_array(3), 3)
    ... def D(x): return x * 2
    >>> @sparse_numerical_function("E", (Arg(3),), (3, 3), 3, [0, 1, 2], [0, 1, 2, 3])
    ... def E(x): return x * 2
  """
  keywords = {"shape": shape, "nnz": nnz, "indices": indices, "indptr": indptr}
  if inputs is not None or any(v is not None for v in keywords.values()) or _reference_positional(shapes):
    given = pattern if inputs is None else inputs
    args = shapes_to_args(tuple(given) if isinstance(given, (tuple, list)) else (given,))
    csc = shapes if inputs is None or pattern is None else (pattern, *shapes)
    spec, _ = pattern_arguments(name, None, csc, keywords)
  else:
    args, spec = shapes_to_args(shapes), pattern

  def decorate(fn: Callable[..., Any]) -> SparseNumericalFunction:
    return SparseNumericalFunction(name, fn, args, spec, device=device)

  return decorate


def _reference_positional(rest: tuple[Any, ...]) -> bool:
  """Whether the arguments after the decorator's second are the reference's (shape, nnz, indices, indptr) rather than
  input shapes: a (rows, cols) pair, an int, then two index arrays."""
  if len(rest) != len(CSC_PARTS):
    return False
  shape, nnz, indices, indptr = rest
  pair = isinstance(shape, tuple) and len(shape) == 2 and all(isinstance(d, (int, np.integer)) for d in shape)
  arrays = all(isinstance(a, (list, np.ndarray, Tensor)) for a in (indices, indptr))
  return pair and isinstance(nnz, (int, np.integer)) and not isinstance(nnz, bool) and arrays


def _shifted(values: Tensor, shift: Tensor | None) -> Tensor:
  return values if shift is None else values + shift.cast(values.dtype)


def stored_coordinates(pattern: Any) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
  """The rows and columns of the stored entries of a CSC pattern (a csc_array, a SparseNumericalFunction: anything
  with indices, indptr and shape), in storage order."""
  cols = np.repeat(np.arange(pattern.shape[1], dtype=np.int64), np.diff(pattern.indptr))
  return np.asarray(pattern.indices, dtype=np.int64), cols


def entry_positions(pattern: Any, rows: ArrayLike, cols: ArrayLike) -> NDArray[np.int64]:
  """Where each entry (rows[e], cols[e]) sits among the stored entries of the CSC `pattern` (its position in
  `pattern.indices`); KeyError when the pattern does not store one of them."""
  stored_rows, stored_cols = stored_coordinates(pattern)
  height = int(pattern.shape[0])
  keys = stored_cols * height + stored_rows
  wanted = np.asarray(cols, dtype=np.int64) * height + np.asarray(rows, dtype=np.int64)
  order = np.argsort(keys, kind="stable")
  found = np.searchsorted(keys[order], wanted)
  if wanted.size and (found.max() >= keys.size or not np.array_equal(keys[order[found]], wanted)):
    raise KeyError(f"entries missing from a pattern of {keys.size} stored entries")
  return order[found]
