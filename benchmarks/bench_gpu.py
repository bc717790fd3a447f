"""GPU benchmark: the P1 quadrotor RK4 step and its Jacobian for a batch of states, CPU module vs CUDA module.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_gpu                        # sizes 1, 1e3, 1e5, 1e6; float64
  .venv/bin/python -m benchmarks.bench_gpu --dtype float32 --sizes 1,1000

What it measures, per batch size N (P1; `vmap` over one function returning F(z) and dF/dz, z = (x, u)):
1. CPU module: the Python call (numpy in, numpy out) of the generated C++, single-threaded.
2. CUDA module, end to end: the same Python call on host numpy arrays (copies to the GPU and back included).
3. CUDA module, device-resident: `call_device()` on inputs and outputs already in device memory (kernel launches and
   the final synchronization; what a caller holding CuPy/PyTorch arrays pays through DLPack).
4. Throughput in states/s for each, and the largest difference between the CUDA and CPU results.

Each time is the median of `--reps` calls after one warm-up call (the first call of a CUDA function also compiles
its kernels with NVRTC, or reads them from anvil's cache). Without a usable CUDA device only the CPU column is
measured and the reason is printed. Temporary files go to anvil's cache.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
from collections.abc import Callable
from typing import Any

import numpy as np

import anvil as av
from anvil.ad import jacobian, vmap
from anvil.problems import quadrotor
from benchmarks.common import median_seconds

NX, NU = quadrotor.NX, quadrotor.NU


def step_and_jacobian(device: str, dtype: Any) -> av.NumericalFunction:
  """z = (x, u) -> (F(x, u), dF/dz): one RK4 step and its dense 12 x 16 Jacobian."""
  step = av.NumericalFunction("p1z", lambda z: quadrotor.step(z[:NX], z[NX:]), av.Arg(NX + NU, dtype=dtype))
  name = f"p1_step_jac_{device.lower()}"
  dstep = jacobian(step)
  return av.NumericalFunction(name, lambda z: (step.fn(z), dstep.fn(z)), step.inputs, device=device)


def median_s(fn: Callable[[], object], reps: int) -> float:
  """Median seconds of `reps` calls after a warm-up call (loading, first-touch)."""
  fn()
  return median_seconds(fn, reps)


def device_resident(fn: av.NumericalFunction, z: np.ndarray) -> Callable[[], None]:
  """The function's `call_device()` on device-resident inputs and preallocated outputs."""
  ws = fn.handle
  arrays = [av.CudaArray.from_numpy(z), *(av.CudaArray(o.shape, np.dtype(o.dtype.fmt)) for o in fn.outputs)]
  pointers = (ctypes.c_uint64 * len(arrays))(*(a.pointer for a in arrays))
  call = ws.entry("call_device", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)

  def run() -> None:
    if (error := call(pointers, ws.pointer)) is not None:
      raise RuntimeError(error.decode())
    _ = (ws, arrays)  # NOTE: keep the workspace and buffers alive as long as the closure

  return run


def rate(n: int, seconds: float) -> str:
  return f"{n / seconds:9.3g}"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", default="1,1000,100000,1000000", help="comma-separated batch sizes")
  ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
  ap.add_argument("--reps", type=int, default=20, help="timed calls per measurement (median)")
  args = ap.parse_args()
  dtype = getattr(av.dtypes, args.dtype)
  cuda = next(d for d in av.devices() if d.name == "CUDA")
  print(f"P1 RK4 step + 12x16 Jacobian, batched with vmap, {args.dtype}; {platform.machine()}, {os.cpu_count()} cores")
  print(f"  {cuda}")
  rng = np.random.default_rng(0)
  cpu_fn, gpu_fn = step_and_jacobian("CPU", dtype), step_and_jacobian("CUDA", dtype)
  head = (
    f"  {'N':>8}  {'CPU ms':>9}  {'CUDA e2e ms':>11}  {'CUDA dev ms':>11}  states/s: {'CPU':>9}  {'e2e':>9}  {'dev':>9}"
  )
  print(head + "  max |CUDA-CPU|")
  for n in (int(float(s)) for s in args.sizes.split(",")):
    z = np.concatenate([quadrotor.TEST_X, quadrotor.TEST_U]) * (1 + 0.1 * rng.standard_normal((n, NX + NU)))
    z = z.astype(np.dtype(args.dtype))
    cpu = vmap(cpu_fn, size=n, name=f"p1_cpu_{n}")
    t_cpu = median_s(lambda cpu=cpu, z=z: cpu(z), args.reps)
    line = f"  {n:>8}  {t_cpu * 1e3:9.3f}"
    if cuda.usable:
      gpu = vmap(gpu_fn, size=n, name=f"p1_cuda_{n}")
      t_e2e = median_s(lambda gpu=gpu, z=z: gpu(z), args.reps)
      t_dev = median_s(device_resident(gpu, z), args.reps)
      diff = max(float(np.max(np.abs(a - b))) for a, b in zip(gpu(z), cpu(z), strict=True))
      line += f"  {t_e2e * 1e3:11.3f}  {t_dev * 1e3:11.3f}            {rate(n, t_cpu)}  {rate(n, t_e2e)}  "
      line += f"{rate(n, t_dev)}  {diff:.1e}"
    else:
      line += f"  {'-':>11}  {'-':>11}            {rate(n, t_cpu)}"
    print(line, flush=True)


if __name__ == "__main__":
  main()
