"""The Python call path: the fast py_object entry point and its ctypes pointer-array fallback agree."""

from __future__ import annotations

import numpy as np
import pytest

import anvil as av
import anvil.codegen.caller
import anvil.codegen.function


@pytest.mark.parametrize("fast", [True, False])
def test_both_entry_points(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
  if not fast:  # numpy's array layout not recognised: pass pointers through a prepared ctypes array
    monkeypatch.setattr(anvil.codegen.caller, "array_data_offset", lambda: None)
    monkeypatch.setattr(anvil.codegen.function, "array_data_offset", lambda: None)
  f = av.NumericalFunction(f"call_path_{fast}", lambda x, a: (a @ x, x.sum()), (av.Arg(3), av.Arg((2, 3))))
  x, a = np.array([1.0, -2.0, 0.5]), np.arange(6.0).reshape(2, 3)
  for _ in range(3):
    y, s = f(x, a)
    np.testing.assert_allclose(y, a @ x, rtol=1e-15)
    assert float(s) == pytest.approx(-0.5) and s.shape == ()
  y2, _ = f(x, a)
  assert y2 is not y and not np.shares_memory(y, y2), "every call returns fresh arrays"
