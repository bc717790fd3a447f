"""anvil's DLPack glue, checked against numpy's own DLPack (host memory stands in for a GPU's)."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from anvil.codegen import dlpack


def test_import_reads_a_producers_array_and_hands_it_back() -> None:
  a = np.arange(6.0).reshape(2, 3)
  view = dlpack.import_array(a)
  assert (view.pointer, view.device, view.shape, view.dtype, view.contiguous) == (
    a.ctypes.data,
    (dlpack.CPU, 0),
    (2, 3),
    np.dtype(np.float64),
    True,
  )
  view.release()
  view.release()  # once only
  strided = dlpack.import_array(np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2])
  assert (strided.shape, strided.dtype, strided.contiguous) == ((3, 2), np.dtype(np.int32), False)
  strided.release()


class _Owner:
  """Memory exported through anvil's producer side, as a CudaArray exports device memory."""

  def __init__(self) -> None:
    self.data = np.arange(4, dtype=np.float32)
    self.shape, self.dtype = (2, 2), self.data.dtype

  def __dlpack__(self, **_: object) -> object:
    return dlpack.export_array(self.data.ctypes.data, (dlpack.CPU, 0), self.shape, self.dtype, self)

  def __dlpack_device__(self) -> tuple[int, int]:
    return dlpack.CPU, 0


def test_export_keeps_the_owner_alive_until_the_consumer_is_done() -> None:
  owner = _Owner()
  alive = weakref.ref(owner)
  consumer = np.from_dlpack(owner)
  del owner
  gc.collect()
  np.testing.assert_array_equal(consumer, [[0.0, 1.0], [2.0, 3.0]])
  assert alive() is not None
  del consumer
  gc.collect()
  assert alive() is None and not dlpack._EXPORTS


def test_an_unconsumed_capsule_frees_its_export() -> None:
  capsule = _Owner().__dlpack__()
  assert len(dlpack._EXPORTS) == 1
  del capsule
  gc.collect()
  assert not dlpack._EXPORTS
