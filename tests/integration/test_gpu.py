"""GPU functions: CUDA and Metal modules render, compile (nvcc, g++) and fail clearly without a GPU; on a machine with a
CUDA GPU (tests marked `gpu`), their results match numpy."""

from __future__ import annotations

import ctypes.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av
from anvil.ad import jacobian, vmap
from anvil.codegen.build import STAGE_COUNTS
from anvil.problems import quadrotor

F32, F64 = av.dtypes.float32, av.dtypes.float64
DEVICES = {d.name: d for d in av.devices()}
NVCC = shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found: CUDA modules cannot be compiled here")
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not DEVICES["CUDA"].usable, reason=f"no usable CUDA device: {DEVICES['CUDA'].reason}")
HAS_DRIVER = ctypes.util.find_library("cuda") is not None or Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists()
#: How init_ws() starts its error message here when CUDA is unusable.
NO_CUDA = "anvil: no CUDA driver" if not HAS_DRIVER else "anvil: "
#: A real architecture every supported nvcc (12.x, 13.x) can build for.
ARCH = "sm_80"
HOST_MAIN = """#include "{module}.hpp"
#include <cstdio>
int main() {{
  try {{
    auto ws = {fn}::init_ws();
    {fn}::IN0_t x; {fn}::IN1_t u; {fn}::OUT0_t y;
    {fn}::call(x, u, y, ws);
    std::printf("ran\\n");
  }} catch (const std::exception& e) {{
    std::printf("%s\\n", e.what());
    return 3;
  }}
}}
"""


def quad(name: str, device: str, dtype: object = F64) -> av.NumericalFunction:
  """P1's RK4 step on `device`."""
  return av.NumericalFunction(name, quadrotor.step, (av.Arg(12, dtype=dtype), av.Arg(4, dtype=dtype)), device=device)


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
  proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
  assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
  return proc


def _host_program(tmp_path: Path, module: str, fn: str, cmd: list[str]) -> str:
  """Compile a program calling `fn` of the module with `cmd` (compiler and flags), run it, return its output."""
  (tmp_path / "main.cpp").write_text(HOST_MAIN.format(module=module, fn=fn))
  _run([*cmd, "main.cpp", "-o", "main"], tmp_path)
  return subprocess.run([str(tmp_path / "main")], capture_output=True, text=True).stdout.strip()


# *** devices ***


def test_devices_report_every_kind_with_a_reason_when_unusable() -> None:
  infos = av.devices()
  assert [d.name for d in infos] == ["CPU", "CUDA", "METAL"]
  for d in infos:
    assert d.usable == (d.reason == ""), d
    assert str(d).startswith(f"{d.name}: {'usable' if d.usable else 'unusable'}")
  cuda, metal = DEVICES["CUDA"], DEVICES["METAL"]
  if cuda.usable:
    assert cuda.gpu and cuda.arch.startswith("sm_") and 0 < cuda.memory_free <= cuda.memory_total
  elif not HAS_DRIVER:
    assert "no CUDA driver (libcuda.so.1 not found)" in cuda.reason
  if sys.platform != "darwin":
    assert not metal.usable and "Metal needs macOS" in metal.reason


@pytest.mark.skipif(DEVICES["CUDA"].usable, reason="CUDA is usable here")
def test_calling_on_an_unusable_device_raises_its_reason() -> None:
  f = quad("gpu_unusable", "CUDA")
  with pytest.raises(av.DeviceUnavailableError, match="device CUDA is not usable") as e:
    f(quadrotor.TEST_X, quadrotor.TEST_U)
  assert DEVICES["CUDA"].reason in str(e.value)


def test_bad_devices_and_mixed_modules_raise(tmp_path: Path) -> None:
  with pytest.raises(ValueError, match="unknown device 'ROCM'; supported devices: CPU, CUDA, METAL"):
    quad("gpu_rocm", "ROCM")
  assert quad("gpu_lower", "cuda").device == "CUDA"
  with pytest.raises(ValueError, match=r"one device, got gpu_mix_cpu \(CPU\), gpu_mix_cuda \(CUDA\)"):
    av.generate_module("mixed", [quad("gpu_mix_cpu", "CPU"), quad("gpu_mix_cuda", "CUDA")], out_dir=tmp_path)
  with pytest.raises(NotImplementedError, match="gathered sparse outputs are not supported on CUDA"):
    pattern = sp.csc_array(np.eye(2))
    _ = av.SparseNumericalFunction("gpu_gather", lambda x: x * 2, av.Arg(2), pattern, "CUDA", gather=[0, 1]).header_code


# *** CUDA without a GPU: render, compile with nvcc ***


def _nvcc_cubin(tmp_path: Path, fn: av.NumericalFunction) -> None:
  """Build the kernels NVRTC compiles at run time with nvcc, for a real GPU architecture, warnings as errors."""
  source = tmp_path / f"{fn.name}.cu"
  source.write_text(fn.gpu_layout.source)
  _run(
    [str(NVCC), "-cubin", f"-arch={ARCH}", "-Werror", "all-warnings", "-o", f"{fn.name}.cubin", source.name], tmp_path
  )
  assert (tmp_path / f"{fn.name}.cubin").stat().st_size > 0


@needs_nvcc
def test_cuda_module_renders_and_compiles_with_nvcc(tmp_path: Path) -> None:
  f = quad("gpu_quad", "CUDA")
  batched = vmap(f, size=1000, name="gpu_quad_batch")
  files = av.generate_module("gpu_mod", [f, batched], out_dir=tmp_path)
  assert files == (tmp_path / "gpu_mod.hpp",) and not (tmp_path / "gpu_mod.cpp").exists()
  header = files[0].read_text()
  assert header.count('R"anvil_kernels(') == 2 and "void call_device(" in header and "cuLaunchKernel" in header
  for fn in (f, batched):
    _nvcc_cubin(tmp_path, fn)
  # the host code: nvcc with the host compiler's warnings as errors; without a driver init_ws() says so
  flags = ["-std=c++17", "-Xcompiler", "-Wall,-Wextra,-Werror", "--cudart", "none"]
  out = _host_program(tmp_path, "gpu_mod", "gpu_quad_batch", [str(NVCC), *flags])
  assert out == "ran" if DEVICES["CUDA"].usable else out.startswith(NO_CUDA)


@needs_nvcc
def test_cuda_float32_kernels_compile_with_nvcc(tmp_path: Path) -> None:
  batched = vmap(quad("gpu_quad32", "CUDA", F32), size=1000)
  assert "float4" in batched.gpu_layout.source and "double" not in batched.gpu_layout.source
  _nvcc_cubin(tmp_path, batched)


@pytest.mark.parametrize("cxx", [c for c in ("g++", "clang++") if shutil.which(c)])
def test_cuda_host_code_compiles_with_plain_cxx(tmp_path: Path, cxx: str) -> None:
  av.generate_module("gpu_plain", [quad("gpu_plain_quad", "CUDA")], out_dir=tmp_path)
  flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ldl"]
  out = _host_program(tmp_path, "gpu_plain", "gpu_plain_quad", [cxx, *flags])
  assert out == "ran" if DEVICES["CUDA"].usable else out.startswith(NO_CUDA)


@needs_nvcc
def test_cuda_jit_builds_with_nvcc_and_caches(fresh_cache: Path) -> None:
  library = Path(quad("gpu_jit", "CUDA").library)
  assert library.is_file() and library.parent == fresh_cache / "lib"
  symbols = _run(["nm", "-D", "--defined-only", str(library)], fresh_cache).stdout
  for entry in ("ws_new", "ws_free", "call", "call_device"):
    assert f"anvil_gpu_jit_{entry}" in symbols
  compiles = STAGE_COUNTS["compile"]
  assert quad("gpu_jit", "CUDA").library == str(library)
  assert STAGE_COUNTS["compile"] == compiles


# *** Metal without a Mac: render, compile the host code, float64 errors ***


def test_metal_module_renders_and_its_host_code_compiles(tmp_path: Path) -> None:
  f = quad("gpu_metal", "METAL", F32)
  av.generate_module("gpu_metal_mod", [f, vmap(f, size=64)], out_dir=tmp_path)
  header = (tmp_path / "gpu_metal_mod.hpp").read_text()
  assert "kernel void k0(device float* data0" in header and "call_device" not in header
  assert "precise::cos(" in f.gpu_layout.source and "double" not in f.gpu_layout.source
  cxx = shutil.which("c++") or shutil.which("g++") or "clang++"
  out = _host_program(
    tmp_path, "gpu_metal_mod", "gpu_metal", [cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-ldl"]
  )
  assert out == "ran" if DEVICES["METAL"].usable else out.startswith("anvil: Metal is not available (it needs macOS)")


def test_metal_rejects_float64_inputs() -> None:
  with pytest.raises(TypeError, match=r"gpu_m64: input 1 \(u\) is float64, but Metal has no float64: declare it"):
    av.NumericalFunction("gpu_m64", quadrotor.step, (av.Arg(12, dtype=F32), av.Arg(4)), device="METAL")


def test_metal_rejects_float64_constants_and_computations() -> None:
  gains = av.Tensor(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
  x32 = av.Arg(2, dtype=F32)
  with pytest.raises(TypeError, match=r"captured constant 0 \(6 values: 1, 2, 3, 4, \.\.\.\) is float64, but Metal"):
    _ = av.NumericalFunction("gpu_mconst", lambda x: (gains @ x.cast(F64)).cast(F32), x32, device="METAL").header_code
  with pytest.raises(TypeError, match=r"captured constant 0 \(2 values: 0.5, -1\) is float64"):
    _ = av.NumericalFunction(
      "gpu_mlist", lambda x: x * av.Tensor([0.5, -1.0], dtype=F64), x32, device="METAL"
    ).header_code
  # a list (or numpy array) made while a float32 function is traced is float32: the default float follows the inputs
  listed = av.NumericalFunction("gpu_mlist32", lambda x: x * av.Tensor([0.5, -1.0]), x32, device="METAL")
  assert "device float*" in listed.header_code and "double" not in listed.header_code
  with pytest.raises(TypeError, match="output 0 is float64"):
    _ = av.NumericalFunction("gpu_mout", lambda x: x.cast(F64), x32, device="METAL").header_code
  with pytest.raises(TypeError, match=r"computes in double, which METAL cannot"):
    _ = av.NumericalFunction("gpu_mmid", lambda x: x.cast(F64).sin().cast(F32), x32, device="METAL").header_code
  ok = av.NumericalFunction("gpu_m32", lambda x: x * av.Tensor([0.5, -1.0], dtype=F32), x32, device="METAL")
  assert "device float*" in ok.header_code


# *** on a CUDA GPU ***

X = np.array([quadrotor.TEST_X * (1 + 0.1 * k) for k in range(1000)])
U = np.array([quadrotor.TEST_U * (1 - 0.05 * np.sin(k)) for k in range(1000)])


@gpu
@needs_cuda
@pytest.mark.parametrize(("dtype", "rtol"), [(F64, 1e-12), (F32, 2e-5)], ids=["float64", "float32"])
def test_cuda_p1_matches_numpy(dtype: object, rtol: float) -> None:
  f = quad(f"gpu_p1_{dtype.name}", "CUDA", dtype)
  y = f(quadrotor.TEST_X, quadrotor.TEST_U)
  assert y.dtype == np.dtype(dtype.fmt)  # type: ignore[attr-defined]
  np.testing.assert_allclose(y, quadrotor.step_numpy(quadrotor.TEST_X, quadrotor.TEST_U), rtol=rtol, atol=rtol)


@gpu
@needs_cuda
def test_cuda_batched_p1_matches_numpy_for_1000_states() -> None:
  # NOTE: CUDA's double sin/cos are within 2 ulp, not correctly rounded as glibc's: at these states (angles up to 30
  # rad) the step differs from numpy by up to 7e-12 (seen on an H100; the CPU function stays within 6e-13).
  tol = 1e-11
  fb = vmap(quad("gpu_p1b", "CUDA"), size=1000)
  expected = np.array([quadrotor.step_numpy(x, u) for x, u in zip(X, U, strict=True)])
  np.testing.assert_allclose(fb(X, U), expected, rtol=tol, atol=tol)
  xd, ud = av.CudaArray.from_numpy(X), av.CudaArray.from_numpy(U)  # device arrays: no host round trip
  yd = fb(xd, ud)
  assert isinstance(yd, av.CudaArray) and yd.shape == (1000, 12)
  np.testing.assert_allclose(np.asarray(yd), expected, rtol=tol, atol=tol)
  with pytest.raises(TypeError, match="input 1 \\(u\\) is a host array"):
    fb(xd, U)


@gpu
@needs_cuda
def test_cuda_dense_jacobian_matches_cpu() -> None:
  jac_gpu = jacobian(quad("gpu_p1j", "CUDA"))
  jac_cpu = jacobian(quad("gpu_p1j_cpu", "CPU"))
  np.testing.assert_allclose(
    jac_gpu(quadrotor.TEST_X, quadrotor.TEST_U), jac_cpu(quadrotor.TEST_X, quadrotor.TEST_U), rtol=1e-11, atol=1e-12
  )
  batched = vmap(jac_gpu, size=1000)
  got = batched(X, U)
  for k in (0, 499, 999):
    np.testing.assert_allclose(got[k], jac_cpu(X[k], U[k]), rtol=1e-11, atol=1e-12)


@gpu
@needs_cuda
def test_cuda_dlpack_with_cupy() -> None:
  cupy = pytest.importorskip("cupy")
  fb = vmap(quad("gpu_p1_cupy", "CUDA"), size=1000)
  y = cupy.from_dlpack(fb(cupy.asarray(X), cupy.asarray(U)))
  np.testing.assert_allclose(cupy.asnumpy(y), fb(X, U), rtol=1e-12, atol=1e-12)
