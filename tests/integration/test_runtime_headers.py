"""The runtime headers (include/anvil/*.hpp) on their own: each compiles alone with g++ and clang++, the Riccati
interior point and the active-set KKT solve are checked against OSQP through small C++ drivers, the QP contract is
enforced at compile time, and generated modules inline every header once."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import osqp
import pytest
import scipy.sparse as sp

import anvil as av
from anvil.codegen.gpu import NVRTC_LIBRARIES
from anvil.codegen.runtime import INCLUDE_DIRS, header_path
from anvil.problems.ocp_qp import osqp_solution, random_qp
from anvil.qp import QPStatus, RiccatiQP
from anvil.qp.kkt import ActiveSetKKT
from anvil.sqp import SQPStatus
from tests.conftest import write_osqp_sources

HEADERS = sorted(p.name for root in INCLUDE_DIRS for p in (root / "anvil").glob("*.hpp"))
WARNINGS = ("-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror")


@pytest.fixture(scope="module")
def osqp_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
  """OSQP's C sources and headers (with QDLDL) as the wheel generates them, written to a folder."""
  return write_osqp_sources(tmp_path_factory.mktemp("osqp_sources"), "hdr_")


def includes(osqp_root: Path) -> list[str]:
  """-I flags for every runtime header folder and OSQP's headers."""
  folders = [*INCLUDE_DIRS, osqp_root / "osqp", osqp_root / "osqp/inc/public", osqp_root / "osqp/inc/private"]
  return [f"-I{f}" for f in folders]


def build(cxx: str, tmp: Path, main: str, flags: list[str], c_sources: list[Path] = ()) -> Path:
  """Compile main.cpp (and C sources) into tmp/main; fail the test with the compiler's output otherwise."""
  (tmp / "main.cpp").write_text(main)
  objects = []
  for src in c_sources:
    obj = tmp / f"{src.stem}.o"
    subprocess.run(["cc", "-std=c99", "-O2", *[f for f in flags if f.startswith("-I")], "-c", str(src), "-o", str(obj)],
                   check=True)  # fmt: skip
    objects.append(str(obj))
  exe = tmp / "main"
  proc = subprocess.run([cxx, *WARNINGS, "-O2", *flags, str(tmp / "main.cpp"), *objects, "-o", str(exe), "-lm"],
                        capture_output=True, text=True)  # fmt: skip
  assert proc.returncode == 0, proc.stderr[:3000]
  return exe


def run(exe: Path, numbers: np.ndarray) -> list[float]:
  """Run exe with the numbers on stdin; its whitespace-separated output as floats."""
  text = " ".join(repr(float(v)) for v in np.ravel(numbers))
  proc = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  return [float(v) for v in proc.stdout.split()]


@pytest.mark.parametrize("header", HEADERS)
def test_each_header_compiles_on_its_own(header: str, cxx: str, tmp_path: Path, osqp_sources: Path) -> None:
  source = tmp_path / "alone.cpp"
  source.write_text(f'#include "anvil/{header}"\n#include "anvil/{header}"  // twice: the include guard\n')
  proc = subprocess.run([cxx, *WARNINGS, *includes(osqp_sources), "-fsyntax-only", str(source)], capture_output=True,
                        text=True)  # fmt: skip
  assert proc.returncode == 0, proc.stderr[:3000]


def test_headers_are_guarded_and_include_only_headers_that_exist() -> None:
  for header in HEADERS:
    text = header_path(f"anvil/{header}").read_text()
    guard = f"ANVIL_{header.removesuffix('.hpp').upper()}_HPP"
    assert f"#ifndef {guard}" in text and f"#define {guard}" in text, header
    for name in re.findall(r'#include "(anvil/[^"]+)"', text):
      assert header_path(name).is_file()


@pytest.mark.parametrize(("header", "status"), [("qp", QPStatus), ("sqp", SQPStatus)])
def test_python_statuses_read_the_cpp_codes(header: str, status: type[QPStatus] | type[SQPStatus]) -> None:
  enum = re.search(r"enum Status : int \{([^}]*)\}", header_path(f"anvil/{header}.hpp").read_text())
  assert enum is not None
  codes = {name.strip(): int(value) for name, value in (item.split("=") for item in enum.group(1).split(","))}
  assert codes == {s.value: i for i, s in enumerate(status)}
  assert all(status.from_code(code) == name for name, code in codes.items())


def test_cuda_header_lists_the_nvrtc_libraries_python_probes() -> None:
  text = header_path("anvil/cuda.hpp").read_text()
  listed = re.search(r"kNvrtcLibraries\[\] = \{([^}]*)\}", text)
  assert listed and tuple(re.findall(r'"([^"]+)"', listed.group(1))) == NVRTC_LIBRARIES


RICCATI_DRIVER = """#include <cstdio>
#include "anvil/riccati.hpp"
using QP = anvil::qp::Riccati<NX, NU, HORIZON, NG, NGN>;
static QP::Data data;
static QP::Solution sol;
static QP::Workspace ws;
int main() {
  double* flat = reinterpret_cast<double*>(&data);
  for (unsigned i = 0; i < sizeof(data) / sizeof(double); ++i)
    if (std::scanf("%lf", &flat[i]) != 1) return 2;
  const int status = QP::solve(data, 1e-10, 60, sol, ws, false);
  std::printf("%d %d\\n", status, sol.iterations);
  for (int k = 0; k <= HORIZON; ++k)
    for (int i = 0; i < NX; ++i) std::printf("%.17g\\n", sol.x[k][i]);
  for (int k = 0; k < HORIZON; ++k)
    for (int i = 0; i < NU; ++i) std::printf("%.17g\\n", sol.u[k][i]);
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_riccati_header_solves_qps_like_osqp(cxx: str, tmp_path: Path, sanitize: bool) -> None:
  """The interior point compiled from anvil/riccati.hpp alone (no generated code), fed flat Data."""
  nx, nu, N, ng, ngN = 3, 2, 8, 6, 1
  sizes = [f"-DNX={nx}", f"-DNU={nu}", f"-DHORIZON={N}", f"-DNG={ng}", f"-DNGN={ngN}"]
  flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"] if sanitize else []
  exe = build(cxx, tmp_path, RICCATI_DRIVER, [*sizes, *flags, *(f"-I{d}" for d in INCLUDE_DIRS)])
  shapes = RiccatiQP("hdr_shapes", nx, nu, N, ng=ng, ngN=ngN).shapes
  rng = np.random.default_rng(5)
  for pull in (0.1, 3.0):
    d = random_qp(rng, nx, nu, N, ng, ngN, pull)
    fields = {**{k: np.zeros(shapes[k]) for k in RiccatiQP.PRICES}, **d}  # every row hard
    flat = np.concatenate([np.clip(np.asarray(fields[k], dtype=np.float64), -1e30, 1e30).reshape(-1) for k in shapes])
    out = run(exe, flat)
    assert int(out[0]) == 0 and int(out[1]) < 40, "solved"
    x, u = np.array(out[2 : 2 + (N + 1) * nx]).reshape(N + 1, nx), np.array(out[2 + (N + 1) * nx :]).reshape(N, nu)
    x_ref, u_ref, _ = osqp_solution(d)
    np.testing.assert_allclose(x, x_ref, atol=1e-6)
    np.testing.assert_allclose(u, u_ref, atol=1e-6)


#: (rows, inner, columns) of the dense products checked: widths below, at and past a vector of 2, 4 and 8 lanes (SSE2,
#: AVX, AVX-512), tails of 1 to 7 columns after whole vectors and after panels of 3 and 4 vectors, panels alone and
#: panels with whole vectors after them (51 and 69: a condensed chain stage's [A B]).
PRODUCTS = ((3, 4, 1), (5, 3, 2), (2, 7, 3), (5, 4, 5), (3, 6, 6), (6, 5, 7), (4, 3, 9), (5, 9, 13), (3, 5, 16),
            (3, 4, 17), (9, 5, 19), (2, 6, 20), (5, 3, 24), (4, 21, 27), (3, 7, 28), (2, 5, 45), (5, 45, 51),
            (4, 45, 69))  # fmt: skip

DENSE_DRIVER = """#include <cstdio>
#include "anvil/dense.hpp"
template <int rows, int inner, int len>
bool product() {  // C = A B; Q's lower triangle += B'B; A's first row times B three ways; each printed
  static double A[rows][inner], B[inner][len], C[rows][len], Q[len][len], G[len][len], y[len], s[len];
  for (auto& row : A) for (double& v : row) if (std::scanf("%lf", &v) != 1) return false;
  for (auto& row : B) for (double& v : row) if (std::scanf("%lf", &v) != 1) return false;
  anvil::dense::multiply_blocked<rows, inner, len>(A, B, C);
  for (auto& row : Q) for (double& v : row) v = 1;
  anvil::dense::add_lower_product<0>(B, B, Q);
  anvil::dense::combine_rows<inner, len>(A[0], B, y);  // y = A[0] B
  anvil::dense::subtract_rows<len>(B[0], [](int k) { return A[0][k]; }, B + 1, inner - 1, A[0][0], s);
  const double* pointers[inner];
  for (int l = 0; l < inner; ++l) pointers[l] = B[l];
  for (auto& row : G) for (double& v : row) v = 1;
  anvil::dense::add_lower_gram<0, len, len>(pointers, A[0], inner, G);  // G += B' diag(A[0]) B
  constexpr int R = rows < anvil::dense::block_rows ? rows : anvil::dense::block_rows;
  static double D[R][len];  // rows of B, less combinations of B's rows, scaled, R at a time and in place
  for (int r = 0; r < R; ++r) for (int j = 0; j < len; ++j) D[r][j] = B[r % inner][j];
  anvil::dense::subtract_combinations<R, len, double>([](int r) { return D[r]; }, [](int r, int k) { return A[r][k]; },
      [](int k) { return B[1 + k]; }, inner - 1, [](int r) { return A[r][0]; }, [](int r) { return D[r]; });
  for (auto& row : C) for (double v : row) std::printf("%.17g\\n", v);
  for (int i = 0; i < len; ++i) for (int j = 0; j <= i; ++j) std::printf("%.17g\\n", Q[i][j]);
  for (double v : y) std::printf("%.17g\\n", v);
  for (double v : s) std::printf("%.17g\\n", v);
  for (int i = 0; i < len; ++i) for (int j = 0; j <= i; ++j) std::printf("%.17g\\n", G[i][j]);
  std::printf("%d\\n", R);
  for (auto& row : D) for (double v : row) std::printf("%.17g\\n", v);
  std::printf("%.17g\\n", anvil::dense::interleaved_dot<len>(B[0], B[inner - 1]));
  static double dots[inner];  // every row of B times its last, in blocks of block_rows rows, then of 4, 2 and 1
  anvil::dense::interleaved_dots<anvil::dense::block_rows, len>(pointers, inner, B[inner - 1], dots);
  for (double v : dots) std::printf("%.17g\\n", v);
  return true;
}
int main() { return (CASES) ? 0 : 2; }
"""


def ordered_sum(a: np.ndarray, b: np.ndarray) -> float:
  """a'b summed term by term in order, as the kernels promise (IEEE doubles, no fused multiply-adds)."""
  total = float(a[0]) * float(b[0])
  for x, y in zip(a[1:], b[1:], strict=True):
    total += float(x) * float(y)
  return total


def ordered_difference(first: float, a: np.ndarray, b: np.ndarray, scale: float) -> float:
  """(first - a'b) * scale, a'b's terms subtracted one by one in order (subtract_rows' promise)."""
  total = float(first)
  for x, y in zip(a, b, strict=True):
    total -= float(x) * float(y)
  return total * float(scale)


def interleaved_sum(a: np.ndarray, b: np.ndarray) -> float:
  """a'b in four sums, term j into sum j % 4 in order, added as (s0 + s1) + (s2 + s3) (interleaved_dot's promise)."""
  sums = [0.0] * 4
  for j, (x, y) in enumerate(zip(a, b, strict=True)):
    sums[j % 4] += float(x) * float(y)
  return (sums[0] + sums[1]) + (sums[2] + sums[3])


def cpu_has(flag: str) -> bool:
  """Whether this machine's CPU reports the instruction-set flag (Linux's /proc/cpuinfo; False elsewhere)."""
  cpuinfo = Path("/proc/cpuinfo")
  return cpuinfo.exists() and flag in cpuinfo.read_text().split()


#: The builds of the dense check: the target's own vectors, AVX2's and AVX-512's 4 and 8 lanes where the CPU runs them,
#: and SSE2's 2 under the sanitizers (no read or write out of bounds).
DENSE_FLAGS = [
  pytest.param(["-march=native"], id="native"),
  pytest.param(["-mavx2"], id="avx2", marks=pytest.mark.skipif(not cpu_has("avx2"), reason="no AVX2 on this CPU")),
  pytest.param(
    ["-mavx512f", "-mavx512vl"], id="avx512", marks=pytest.mark.skipif(not cpu_has("avx512vl"), reason="no AVX-512")
  ),
  pytest.param(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"], id="sanitized"),
]


@pytest.mark.parametrize("flags", DENSE_FLAGS)
def test_dense_products_sum_in_order_at_every_width(cxx: str, tmp_path: Path, flags: list[str]) -> None:
  """anvil/dense.hpp's kernels at widths that leave 1 to 7 columns after the last whole vector (the vector computing
  them overlaps columns already computed): the register-blocked product and lower product, a combination of rows, a
  triangular solve's row, a weighted Gram product, several rows' combinations subtracted in place, in passes over
  their columns, and dot products in four interleaved sums, one row and several rows together. Every entry equals its
  terms summed in order, bit for bit, at every vector width."""
  cases = " && ".join(f"product<{r}, {k}, {n}>()" for r, k, n in PRODUCTS)
  exe = build(cxx, tmp_path, DENSE_DRIVER, ["-ffp-contract=off", f"-DCASES={cases}", *flags,
                                            *(f"-I{d}" for d in INCLUDE_DIRS)])  # fmt: skip
  rng = np.random.default_rng(7)
  data = [(rng.standard_normal((r, k)), rng.standard_normal((k, n))) for r, k, n in PRODUCTS]
  out = iter(run(exe, np.concatenate([np.concatenate([a.ravel(), b.ravel()]) for a, b in data])))
  take = lambda count: [next(out) for _ in range(count)]
  for a, b in data:
    rows, cols = a.shape[0], b.shape[1]
    product = np.array([take(cols) for _ in range(rows)])
    expected = np.array([[ordered_sum(a[i], b[:, j]) for j in range(cols)] for i in range(rows)])
    np.testing.assert_array_equal(product, expected)
    lower = take(cols * (cols + 1) // 2)
    assert lower == [1 + ordered_sum(b[:, i], b[:, j]) for i in range(cols) for j in range(i + 1)]
    assert take(cols) == [ordered_sum(a[0], b[:, j]) for j in range(cols)]
    assert take(cols) == [ordered_difference(b[0, j], a[0, : len(b) - 1], b[1:, j], a[0, 0]) for j in range(cols)]
    gram = take(cols * (cols + 1) // 2)
    weighted = [1 + ordered_sum(a[0] * b[:, i], b[:, j]) for i in range(cols) for j in range(i + 1)]
    assert gram == weighted
    together = int(take(1)[0])  # rows a pass of subtract_combinations serves: the build's block_rows, or all of a's
    combined = np.array([take(cols) for _ in range(together)])
    inner = len(b)
    expected = [[ordered_difference(b[r % inner, j], a[r, : inner - 1], b[1:, j], a[r, 0]) for j in range(cols)]
                for r in range(together)]  # fmt: skip
    np.testing.assert_array_equal(combined, expected)
    assert take(1) == [interleaved_sum(b[0], b[-1])]
    assert take(inner) == [interleaved_sum(row, b[-1]) for row in b]


#: Sizes of the Cholesky solves checked: below and from 8 (solve_transposed_from's vector loops), past 2, 4 and 8 lanes.
CHOLESKY_SIZES = (1, 2, 3, 5, 7, 8, 9, 12, 17, 24, 33)

CHOLESKY_DRIVER = """#include <cstdio>
#include "anvil/dense.hpp"
template <int m>
bool solve() {  // v <- (L L')^-1 v, L's diagonal holding the reciprocals
  static double L[m][m], v[m];
  for (auto& row : L) for (double& e : row) if (std::scanf("%lf", &e) != 1) return false;
  for (double& e : v) if (std::scanf("%lf", &e) != 1) return false;
  anvil::dense::cholesky_solve(L, v);
  for (double e : v) std::printf("%.17g\\n", e);
  return true;
}
int main() { return (CASES) ? 0 : 2; }
"""


def ordered_cholesky_solve(lower: np.ndarray, v: np.ndarray) -> list[float]:
  """(L L')^-1 v in cholesky_solve's order: L w = v row by row, each sum over the entries found in order; then L'
  from the last entry up, each entry less its terms as the entries are found (from 8 entries on), or (below 8) each
  entry's sum over L's column in the order of the rows."""
  m, w = len(v), [float(e) for e in v]
  for i in range(m):
    for k in range(i):
      w[i] -= float(lower[i, k]) * w[k]
    w[i] *= float(lower[i, i])
  for i in range(m - 1, -1, -1):
    if m >= 8:
      w[i] *= float(lower[i, i])
      for j in range(i):
        w[j] -= float(lower[i, j]) * w[i]
    else:
      for k in range(i + 1, m):
        w[i] -= float(lower[k, i]) * w[k]
      w[i] *= float(lower[i, i])
  return w


@pytest.mark.parametrize("flags", DENSE_FLAGS)
def test_cholesky_solve_in_order_at_every_width(cxx: str, tmp_path: Path, flags: list[str]) -> None:
  """dense::cholesky_solve solves L L' x = v (against numpy's solve), each entry's terms subtracted in its promised
  order, bit for bit, at every vector width; the entries of L above its diagonal are never read (NaN there)."""
  cases = " && ".join(f"solve<{m}>()" for m in CHOLESKY_SIZES)
  exe = build(cxx, tmp_path, CHOLESKY_DRIVER, ["-ffp-contract=off", f"-DCASES={cases}", *flags,
                                               *(f"-I{d}" for d in INCLUDE_DIRS)])  # fmt: skip
  rng = np.random.default_rng(3)
  data = []
  for m in CHOLESKY_SIZES:
    off_diagonal = np.tril(rng.standard_normal((m, m)), -1) / np.sqrt(m)  # small enough: well conditioned
    factor = off_diagonal + np.diag(rng.uniform(1.0, 3.0, m))
    stored = np.where(np.tri(m, dtype=bool), factor, np.nan)
    stored[np.diag_indices(m)] = 1.0 / np.diag(factor)
    data.append((factor, stored, rng.standard_normal(m)))
  out = iter(run(exe, np.concatenate([np.concatenate([s.ravel(), v]) for _, s, v in data])))
  for factor, stored, v in data:
    x = [next(out) for _ in v]
    assert x == ordered_cholesky_solve(stored, v)
    np.testing.assert_allclose(x, np.linalg.solve(factor @ factor.T, v), rtol=1e-9, atol=1e-12)


def kkt_layout(kkt: ActiveSetKKT, n: int, m: int) -> str:
  """A Layout and Workspace for anvil::qp::ActiveSetKKT, as the generated backends write them."""
  tables = "\n".join(f"  static constexpr int {k}[{max(len(v), 1)}] = {{{', '.join(map(str, v)) or 0}}};"
                     for k, v in kkt.tables.items())  # fmt: skip
  buffers = "\n".join(f"  anvil::Buffer<{t}, {size}> {name};" for t, name, size in kkt.buffers)
  return (f"struct Layout {{\n  static constexpr int n = {n}, m = {m}, nK = n + m, nnz_P = {kkt.p_pattern.nnz}, "
          f"nnz_A = {kkt.a_pattern.nnz};\n{tables}\n}};\nstruct Workspace {{\n{buffers}\n}};\n")  # fmt: skip


#: A C++ driver's reader of numbers from stdin into a fixed-size array (false when they run out).
READ_NUMBERS = """template <int size>
bool read(double (&v)[size]) {
  for (double& e : v)
    if (std::scanf("%lf", &e) != 1) return false;
  return true;
}
"""

KKT_DRIVER = (
  """#include <cstdio>
#include "anvil/support.hpp"
#include "anvil/kkt.hpp"
#include "layout.hpp"
using KKT = anvil::qp::ActiveSetKKT<Layout, Workspace>;
double P[Layout::nnz_P], A[Layout::nnz_A], q[Layout::n], l[Layout::m], u[Layout::m], x[Layout::n], y[Layout::m];
"""
  + READ_NUMBERS
  + """int main() {
  static Workspace ws;
  if (!read(P) || !read(A) || !read(q) || !read(l) || !read(u) || !read(x) || !read(y)) return 2;
  KKT::forget(ws);
  std::printf("%d\\n", KKT::convex_on_active_set(P, A, l, u, ws) ? 1 : 0);
  std::printf("%d\\n", static_cast<int>(KKT::polish(P, A, q, l, u, x, y, ws)));
  for (int j = 0; j < Layout::n; ++j) std::printf("%.17g\\n", ws.polish_d[j]);
  for (int i = 0; i < Layout::m; ++i) std::printf("%.17g\\n", ws.polish_y[i]);
}
"""
)


def test_kkt_header_screens_and_polishes(cxx: str, tmp_path: Path, osqp_sources: Path) -> None:
  """anvil/kkt.hpp with QDLDL alone: from a loose ADMM iterate the polish finds the exact solution OSQP reaches at
  1e-10, with multipliers of OSQP's signs; the inertia test passes for a convex QP and fails when P is indefinite on
  the null space of the equality rows."""
  rng = np.random.default_rng(3)
  n, m_eq, m_in = 8, 2, 6
  M = rng.normal(size=(n, n))
  P = sp.csc_matrix(np.triu(M @ M.T / n + 0.1 * np.eye(n)))
  A = sp.csc_matrix(np.vstack([rng.normal(size=(m_eq + m_in, n)), np.eye(n)]))
  m = A.shape[0]
  lo = np.concatenate([np.zeros(m_eq), -np.ones(m_in), -0.3 * np.ones(n)])
  hi = np.concatenate([np.zeros(m_eq), np.ones(m_in), 0.3 * np.ones(n)])
  q = 3.0 * rng.normal(size=n)
  kkt = ActiveSetKKT(sp.csc_array(P), sp.csc_array(A))
  (tmp_path / "layout.hpp").write_text(kkt_layout(kkt, n, m))
  qdldl = osqp_sources / "osqp/src/qdldl.c"
  exe = build(cxx, tmp_path, KKT_DRIVER, [*includes(osqp_sources), f"-I{tmp_path}"], [qdldl])

  def solve(eps: float) -> tuple[np.ndarray, np.ndarray]:
    solver = osqp.OSQP()
    solver.setup(P, q, A, lo, hi, eps_abs=eps, eps_rel=eps, polishing=eps < 1e-6, verbose=False, max_iter=100000)
    res = solver.solve(raise_error=False)
    return res.x, res.y

  (x_loose, y_loose), (x_ref, y_ref) = solve(1e-3), solve(1e-10)
  assert np.abs(y_ref[m_eq:]).max() > 1e-3, "some inequality is active"
  out = run(exe, np.concatenate([P.data, A.data, q, lo, hi, x_loose, y_loose]))
  assert out[:2] == [1.0, 1.0], "convex, polished"
  np.testing.assert_allclose(out[2 : 2 + n], x_ref, atol=1e-8)
  np.testing.assert_allclose(out[2 + n :], y_ref, atol=1e-7)
  # negative curvature along a direction the equality rows leave free: the screen (equality rows only) says so
  null = np.linalg.svd(A[:m_eq].toarray())[2][-1]
  full = P.toarray() + np.triu(P.toarray(), 1).T
  indefinite = sp.csc_array(np.triu(full - 50.0 * np.outer(null, null)))
  assert indefinite.nnz == P.nnz, "the same (dense) pattern"
  out = run(exe, np.concatenate([indefinite.data, A.data, q, lo, hi, x_loose, y_loose]))
  assert out[0] == 0.0


CONTRACT = """#include "anvil/qp.hpp"
struct Complete {
  using real = double;
  struct Workspace {
    double deadline = 0.0;
  };
  static void reset(Workspace&) {}
  static void shift(Workspace&) {}
  static int load(const double*, const double*, const double*, const double*, bool, Workspace&) { return 0; }
  static int solve(const double*, const double*, const double*, double, bool, Workspace&) { return 0; }
  static const double* primal(const Workspace&) { return nullptr; }
  static const double* dual(const Workspace&) { return nullptr; }
  static int iterations(const Workspace&) { return 0; }
};
struct Partial {
  using real = double;
  struct Workspace {};
  static void reset(Workspace&) {}
  static void shift(Workspace&) {}
  static int load(const double*, const double*, const double*, const double*, bool, Workspace&) { return 0; }
  static int solve(const double*, const double*, const double*, double, Workspace&) { return 0; }
  static const double* primal(const Workspace&) { return nullptr; }
  static const double* dual(const Workspace&) { return nullptr; }
  static int iterations(const Workspace&) { return 0; }
};
static_assert(anvil::qp::implements_contract<BACKEND>());
int main() {}
"""


def test_the_qp_contract_is_checked_at_compile_time(cxx: str, tmp_path: Path) -> None:
  source = tmp_path / "contract.cpp"
  source.write_text(CONTRACT)
  base = [cxx, *WARNINGS, *(f"-I{d}" for d in INCLUDE_DIRS), "-fsyntax-only", str(source)]
  assert subprocess.run([*base, "-DBACKEND=Complete"], capture_output=True).returncode == 0
  proc = subprocess.run([*base, "-DBACKEND=Partial"], capture_output=True, text=True)
  assert proc.returncode != 0 and "QP backend: int solve(const real* q" in proc.stderr
  assert "deadline" in proc.stderr  # NOTE: its Workspace has none


def test_modules_inline_each_runtime_header_once(tmp_path: Path) -> None:
  f = av.NumericalFunction("hdr_f", lambda x: x * 2, av.Arg(2))
  header, source = av.generate_module("hdr_module", [f], out_dir=tmp_path)
  text = header.read_text() + source.read_text()
  assert text.count("#define ANVIL_SUPPORT_HPP") == 1 and '#include "anvil/' not in text
