// anvil::dense: small dense kernels whose sizes are template parameters (the stage blocks of an OCP, an integrator's
// sensitivities). Every loop has a compile-time length and accumulates in local arrays, which compilers keep in
// vector registers; none allocates. Used by the Riccati QP (anvil/riccati.hpp) and the integrators' derivatives; every
// dense factorization lives here: Cholesky (the Riccati recursion, the MHE's arrival cost) and LU with partial
// pivoting on banded matrices (the implicit Runge-Kutta steps' Newton matrices).
#ifndef ANVIL_DENSE_HPP
#define ANVIL_DENSE_HPP

#include <algorithm>
#include <cmath>

#include "anvil/support.hpp"

namespace anvil {
namespace dense {

/// The bytes of the widest vector registers the target compiles for (GCC and clang predefine __AVX512F__, __AVX__,
/// __SSE2__, __ARM_NEON); 0 without any: the kernels are then plain loops. AVX-512's 64: where its units are 512 bits
/// wide (Intel's server cores, AMD's Zen 5) a product runs at up to twice its speed in 256-bit vectors, and where they
/// split a 512-bit operation in two halves (Zen 4) it issues half the instructions. Each lane sums its column's terms
/// in the same order at every width: the results do not depend on it.
#if defined(__AVX512F__)
inline constexpr int vector_bytes = 64;
#elif defined(__AVX__)
inline constexpr int vector_bytes = 32;
#elif defined(__SSE2__) || defined(__ARM_NEON)
inline constexpr int vector_bytes = 16;
#else
inline constexpr int vector_bytes = 0;
#endif

/// The target's vector registers: 32 with AVX-512 (its 256-bit forms included) and on 64-bit ARM, else 16 (AVX2,
/// SSE2). A product's register block keeps its accumulators, the loaded vectors of B and a broadcast coefficient in
/// them: 8 rows by 3 vectors with 32 (28 registers; each loaded vector serves 8 rows, where 4 rows by 4 vectors load
/// a vector for every 4 multiply-adds: 1.2-1.3x slower), 4 rows by 3 vectors with 16 (4 by 4 there needs 20: two
/// accumulators go to the stack at every step).
#if defined(__AVX512VL__) || defined(__aarch64__)
inline constexpr int vector_registers = 32;
#else
inline constexpr int vector_registers = 16;
#endif
inline constexpr int block_rows = vector_registers >= 32 ? 8 : 4;  ///< rows of a register block
inline constexpr int block_vectors = 3;                              ///< vectors per row of a register block

/// v = the vector at p, and the vector v stored at p: an unaligned vector move (the type GCC's and clang's intrinsics
/// headers give unaligned vectors: a T's alignment, may alias T). __builtin_memcpy compiles to the same move on some
/// targets; on others (GCC 12 at -march=haswell or znver3: AVX2) it copies through the stack in halves and the
/// vectors never reach registers.
template <class V, class T>
inline void load(V& v, const T* p) {
  typedef V unaligned __attribute__((aligned(alignof(T)), may_alias));
  v = *reinterpret_cast<const unaligned*>(p);
}
template <class V, class T>
inline void store(T* p, const V& v) {
  typedef V unaligned __attribute__((aligned(alignof(T)), may_alias));
  *reinterpret_cast<unaligned*>(p) = v;
}

/// A vector of `lanes` T's (GCC's and clang's vector extension); one lane: T itself.
template <class T, int lanes>
struct Vector {
  typedef T type __attribute__((vector_size(lanes * sizeof(T))));
};
template <class T>
struct Vector<T, 1> {
  using type = T;
};

/// The lanes of the vectors that cover a row of len T's: the target's, halved while wider than the row (1: scalars).
template <class T, int len>
constexpr int row_lanes() {
  int lanes = vector_bytes / static_cast<int>(sizeof(T));
  while (lanes > 1 && lanes > len) lanes /= 2;
  return lanes > 1 ? lanes : 1;
}

/// The vectors of `lanes` lanes that cover len columns, and the first column of the j-th: whole vectors from column 0,
/// then, where len is not a multiple of lanes, one more ending at column len, which overlaps columns of the one before
/// (computed again the same way: the same values), rather than the rest one column at a time (each sum a chain of
/// dependent additions, which runs at the adder's latency).
constexpr int vectors_over(int len, int lanes) { return (len + lanes - 1) / lanes; }
constexpr int vector_start(int j, int len, int lanes) { return (j + 1) * lanes <= len ? j * lanes : len - lanes; }

/// out = sum_l a[l] M[l][:len], a combination of M's rows (their first len entries) accumulated in local vectors of
/// the target's register width (GCC's and clang's vector extension; the last one overlapping: vector_start): 1.4x
/// (SSE2) to 3x (AVX2) the speed of updating `out` in memory term by term. Plain loops over one local array are left
/// to the auto-vectorizer, which GCC 12 turns, for some lengths (8 and 16 of 12 rows and more), into a transposition
/// of M several times slower (combine_rows<12, 16>: 105 ns, with vectors 12 ns). Each entry sums its terms in the
/// order of l, whatever the width (the same roundings).
template <int rows, int n, int len = n, class T>
void combine_rows(const T* a, const T (&M)[rows][n], T* out) {
  constexpr int lanes = row_lanes<T, len>(), vectors = vectors_over(len, lanes);
  using vec = typename Vector<T, lanes>::type;
  vec acc[vectors];
  for (int j = 0; j < vectors; ++j) {
    vec m;
    load(m, &M[0][vector_start(j, len, lanes)]);
    acc[j] = a[0] * m;
  }
  for (int l = 1; l < rows; ++l) {
    const T c = a[l];
    for (int j = 0; j < vectors; ++j) {
      vec m;
      load(m, &M[l][vector_start(j, len, lanes)]);
      acc[j] += c * m;
    }
  }
  for (int j = 0; j < vectors; ++j) store(out + vector_start(j, len, lanes), acc[j]);
}

/// C[i][j0 + :v lanes] = sum_{l < inner} a(i, l) B[l][j0 + :v lanes] for i < r: one register block of r rows by v
/// vectors, each loaded vector of B's row l serving the r rows and each coefficient a(i, l) the v vectors.
template <int r, int v, int inner, int lanes, int n, int ldc, class T, class Coef>
void multiply_block(Coef&& a, const T (*B)[n], T (*C)[ldc], int j0) {
  using vec = typename Vector<T, lanes>::type;
  vec acc[r][v], b[v];
  for (int q = 0; q < v; ++q) load(b[q], &B[0][j0 + lanes * q]);
  for (int i = 0; i < r; ++i)
    for (int q = 0; q < v; ++q) acc[i][q] = a(i, 0) * b[q];
  for (int l = 1; l < inner; ++l) {
    for (int q = 0; q < v; ++q) load(b[q], &B[l][j0 + lanes * q]);
    for (int i = 0; i < r; ++i) {
      const T c = a(i, l);
      for (int q = 0; q < v; ++q) acc[i][q] += c * b[q];
    }
  }
  for (int i = 0; i < r; ++i)
    for (int q = 0; q < v; ++q) store(&C[i][j0 + lanes * q], acc[i][q]);
}

/// C[i][:len] = sum_{l < inner} a(i, l) B[l][:len] for i < r in register blocks of `lanes`-lane vectors: blocks of
/// block_vectors vectors, then the vectors left; columns left after the last whole vector are computed by one more
/// vector ending at column len, which overlaps columns already computed (computed again the same way: the same
/// values), not one at a time (each sum a chain of dependent additions). lanes <= len (row_lanes).
template <int r, int inner, int len, int lanes, int n, int ldc, class T, class Coef>
void multiply_columns(Coef&& a, const T (&B)[inner][n], T (*C)[ldc]) {
  constexpr int full = len / lanes, rest = len % lanes, panels = full / block_vectors, left = full % block_vectors;
  constexpr int panel = block_vectors * lanes;
  static_assert(full > 0, "a row at least one vector long");
  if constexpr (lanes == 1) {
    T acc[r];  // the rows' sums, independent chains
    for (int j = 0; j < len; ++j) {
      for (int i = 0; i < r; ++i) acc[i] = a(i, 0) * B[0][j];
      for (int l = 1; l < inner; ++l)
        for (int i = 0; i < r; ++i) acc[i] += a(i, l) * B[l][j];
      for (int i = 0; i < r; ++i) C[i][j] = acc[i];
    }
  } else {
    for (int p = 0; p < panels; ++p) multiply_block<r, block_vectors, inner, lanes>(a, B, C, p * panel);
    if constexpr (rest > 0 && panels > 0) {
      multiply_block<r, left + 1, inner, lanes>(a, B, C, len - (left + 1) * lanes);
    } else {
      if constexpr (left > 0) multiply_block<r, left, inner, lanes>(a, B, C, panels * panel);
      if constexpr (rest > 0) multiply_block<r, 1, inner, lanes>(a, B, C, len - lanes);
    }
  }
}

/// C[i][:len] = sum_{l < inner} a(i, l) B[l][:len] for i < r (r rows of a product): multiply_columns in vectors of
/// the target's width, halved for rows shorter than one (row_lanes). Each entry sums its terms in the order of l, the first a product: combine_rows' roundings,
/// row by row.
template <int r, int inner, int len, int n, int ldc, class T, class Coef>
void multiply_rows(Coef&& a, const T (&B)[inner][n], T (*C)[ldc]) {
  multiply_columns<r, inner, len, row_lanes<T, len>()>(a, B, C);
}

/// C = A[:rows, :inner] B[:, :len] (row-major blocks; A's rows from a pointer) in register blocks of block_rows rows
/// of C by block_vectors vectors: a loaded vector of B serves block_rows rows and an entry of A a row's vectors, where
/// combine_rows, a row of C at a time, streams all of B once per row (at 45 x 69 that product runs at half this one's
/// speed). combine_rows' roundings, row by row.
template <int rows, int inner, int len, int m, int n, int ldc, class T>
void multiply_blocked(const T (*A)[m], const T (&B)[inner][n], T (*C)[ldc]) {
  static_assert(len <= ldc && len <= n && inner <= m, "the product's sizes fit its arrays");
  constexpr int full = rows / block_rows * block_rows;
  for (int i = 0; i < full; i += block_rows)
    multiply_rows<block_rows, inner, len>([&](int r, int l) { return A[i + r][l]; }, B, C + i);
  if constexpr (rows > full)
    multiply_rows<rows - full, inner, len>([&](int r, int l) { return A[full + r][l]; }, B, C + full);
}

/// One pass of subtract_combinations: the vectors [end - chunk, end) of the rows (or [0, end)), then the passes before.
template <int R, int len, int end, class T, class Init, class Coef, class Row, class Scale, class Out>
void subtract_pass(Init&& init, Coef&& coef, Row&& row, int count, Scale&& scale, Out&& out) {
  constexpr int lanes = row_lanes<T, len>(), chunk = block_rows * block_vectors / R;
  constexpr int begin = end > chunk ? end - chunk : 0, width = end - begin;
  using vec = typename Vector<T, lanes>::type;
  vec acc[R][width];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < width; ++q) load(acc[r][q], init(r) + vector_start(begin + q, len, lanes));
  for (int k = 0; k < count; ++k) {
    const T* p = row(k);
    vec b[width];
    for (int q = 0; q < width; ++q) load(b[q], p + vector_start(begin + q, len, lanes));
    for (int r = 0; r < R; ++r) {
      const T c = coef(r, k);
      for (int q = 0; q < width; ++q) acc[r][q] -= c * b[q];
    }
  }
  for (int r = 0; r < R; ++r) {
    const T s = scale(r);
    for (int q = 0; q < width; ++q) store(out(r) + vector_start(begin + q, len, lanes), acc[r][q] * s);
  }
  if constexpr (begin > 0) subtract_pass<R, len, begin, T>(init, coef, row, count, scale, out);
}

/// out(r)[:len] = (init(r)[:len] - sum_{k < count} coef(r, k) row(k)[:len]) * scale(r) for r < R (rows given by
/// pointers): each loaded vector of row(k) serves the R rows, whose sums stay in local vectors of the target's register
/// width, block_rows x block_vectors of them (passes over block_rows * block_vectors / R vectors of the columns), the
/// products subtracted in the order of k (a triangular solve's rows, a Cholesky factor's columns: R independent rows,
/// R independent chains, each loaded vector used R times). The passes run from the last columns back, the last vector,
/// which overlaps the one before it (vector_start), in the same pass as that one: out(r) may be init(r).
template <int R, int len, class T, class Init, class Coef, class Row, class Scale, class Out>
void subtract_combinations(Init&& init, Coef&& coef, Row&& row, int count, Scale&& scale, Out&& out) {
  static_assert(R >= 1 && R <= block_rows, "at most block_rows rows at a time (two vectors a row in a pass)");
  constexpr int vectors = vectors_over(len, row_lanes<T, len>());
  subtract_pass<R, len, vectors, T>(init, coef, row, count, scale, out);
}

/// out[:len] = (init[:len] - sum_{k < count} c(k) rows[k][:len]) * scale, the products subtracted in the order of k
/// from accumulators in local vectors of the target's register width (a triangular solve's row: subtracting in
/// memory row after row stores and reloads out at every k). out may be init: every entry is loaded before any is
/// stored. (subtract_combinations of one row computes the same; through its functors and passes, compilers' code for
/// the short rows of a few states was slower, so this one stays its own loop.)
template <int len, int n, class T, class Coef>
void subtract_rows(const T* init, Coef&& c, const T (*rows)[n], int count, T scale, T* out) {
  constexpr int lanes = row_lanes<T, len>(), vectors = vectors_over(len, lanes);
  using vec = typename Vector<T, lanes>::type;
  vec acc[vectors];
  for (int j = 0; j < vectors; ++j) load(acc[j], init + vector_start(j, len, lanes));
  for (int k = 0; k < count; ++k) {
    const T coef = c(k);
    for (int j = 0; j < vectors; ++j) {
      vec m;
      load(m, &rows[k][vector_start(j, len, lanes)]);
      acc[j] -= coef * m;
    }
  }
  for (int j = 0; j < vectors; ++j) store(out + vector_start(j, len, lanes), acc[j] * scale);
}

/// out[r] = a[r]'z over n entries for r < R, each in four interleaved sums (entry j adds to sum j % 4, the sums then
/// added as (s0 + s1) + (s2 + s3)), a row's four sums one vector of 4 lanes where the target has one (two of 2 with
/// SSE2 or NEON, else 4 scalars): each loaded vector of z serves the R rows, whose 4R chains are independent.
template <int R, int n, class T>
void interleaved_dot_block(const T* const* a, const T* z, T* out) {
  constexpr int lanes = row_lanes<T, 4>(), vectors = 4 / lanes, whole = n / 4 * 4;
  using vec = typename Vector<T, lanes>::type;
  vec acc[R][vectors] = {};
  for (int j = 0; j < whole; j += 4)
    for (int q = 0; q < vectors; ++q) {
      vec zv;
      load(zv, z + j + q * lanes);
      for (int r = 0; r < R; ++r) {
        vec av;
        load(av, a[r] + j + q * lanes);
        acc[r][q] += av * zv;
      }
    }
  for (int r = 0; r < R; ++r) {
    T sum[4];
    for (int q = 0; q < vectors; ++q) store(sum + q * lanes, acc[r][q]);
    for (int j = whole; j < n; ++j) sum[j - whole] += a[r][j] * z[j];
    out[r] = (sum[0] + sum[1]) + (sum[2] + sum[3]);
  }
}

/// a'z over n entries in four interleaved sums (interleaved_dot_block's, one row): four independent chains, where one
/// sum of 45 terms is a chain of 45 dependent additions. The same roundings everywhere.
template <int n, class T>
T interleaved_dot(const T* a, const T* z) {
  T out;
  interleaved_dot_block<1, n>(&a, z, &out);
  return out;
}

/// out[r] = a[r]'z for r < count (rows given by pointers, a count known at run time): interleaved_dot's sums, the rows
/// in blocks of up to R sharing each loaded vector of z (the same roundings as one row at a time).
template <int R, int n, class T>
void interleaved_dots(const T* const* a, int count, const T* z, T* out) {
  for (; count >= R; count -= R, a += R, out += R) interleaved_dot_block<R, n>(a, z, out);
  if constexpr (R > 1) interleaved_dots<R / 2, n>(a, count, z, out);
}

/// Rows of M from this many entries on are multiplied by row dots (multiply, multiply_add): shorter rows fill less
/// than a vector of four lanes and a dot's final sums cost more than its products.
inline constexpr int dot_rows_from = 8;

/// out = M x over rows of len entries by dots (interleaved_dots: each row's four interleaved sums, block_rows rows
/// sharing each loaded vector of x), through a local array (out may be x).
template <int rows, int n, int len, class T>
void row_dots(const T (*M)[n], const T* x, T* out) {
  const T* row[rows];
  T dots[rows];
  for (int i = 0; i < rows; ++i) row[i] = M[i];
  interleaved_dots<block_rows, len>(row, rows, x, dots);
  for (int i = 0; i < rows; ++i) out[i] = dots[i];
}

/// out = M x (the first len columns of M). From dot_rows_from columns on, a dot per row (row_dots: vectors along the
/// rows, which are contiguous); below, the products accumulated column by column in a local array, so the rows' sums
/// are independent chains (a plain dot product per row is one chain of dependent additions, which runs at the
/// adder's latency; the columns' loop reads M across its rows, which compiles to scalar code). Either way the same
/// roundings at every width.
template <int rows, int n, int len = n, class T>
void multiply(const T (&M)[rows][n], const T* x, T* out) {
  if constexpr (len >= dot_rows_from) {
    row_dots<rows, n, len>(M, x, out);
  } else {
    T acc[rows];
    for (int i = 0; i < rows; ++i) acc[i] = M[i][0] * x[0];
    for (int j = 1; j < len; ++j) {
      const T c = x[j];
      for (int i = 0; i < rows; ++i) acc[i] += M[i][j] * c;
    }
    for (int i = 0; i < rows; ++i) out[i] = acc[i];
  }
}

/// out = b + M x (the first len columns of M): multiply's products, b's entry added to each row's dot, or (below
/// dot_rows_from columns) each row's chain starting from b's entry.
template <int rows, int n, int len = n, class T>
void multiply_add(const T (*M)[n], const T* x, const T* b, T* out) {
  T acc[rows];
  if constexpr (len >= dot_rows_from) {
    row_dots<rows, n, len>(M, x, acc);
    for (int i = 0; i < rows; ++i) acc[i] = b[i] + acc[i];
  } else {
    for (int i = 0; i < rows; ++i) acc[i] = b[i];
    for (int j = 0; j < len; ++j) {
      const T c = x[j];
      for (int i = 0; i < rows; ++i) acc[i] += M[i][j] * c;
    }
  }
  for (int i = 0; i < rows; ++i) out[i] = acc[i];
}

/// Q[i][:i+1] = base[i][:i+1] + (M'N)[i][:i+1] for first <= i < len (len: all of n by default): the lower triangle of
/// M'N (of their first len columns) added to base's (Q's own, or another matrix's: a copy of it into Q first is a
/// pass more, and compilers turn its triangle into a library call per row), block_rows rows at a time, each block of
/// rows computed up to its last row's column in register blocks (multiply_rows: compile-time lengths).
template <int first, int len = 0, int rows, int n, int s, int sb, class T>
void add_lower_product(const T (&M)[rows][n], const T (&N)[rows][n], const T (&base)[sb][sb], T (&Q)[s][s]) {
  constexpr int last = len > 0 ? len : n;
  constexpr int end = first + block_rows < last ? first + block_rows : last;
  static_assert(last <= sb, "the base covers the product");
  T block[end - first][end];
  multiply_rows<end - first, rows, end>([&](int r, int l) { return M[l][first + r]; }, N, block);
  for (int i = first; i < end; ++i)
    for (int j = 0; j <= i; ++j) Q[i][j] = base[i][j] + block[i - first][j];
  if constexpr (end < last) add_lower_product<end, last>(M, N, base, Q);
}

/// Q[i][:i+1] += (M'N)[i][:i+1] for first <= i < len (add_lower_product onto Q's own lower triangle).
template <int first, int len = 0, int rows, int n, int s, class T>
void add_lower_product(const T (&M)[rows][n], const T (&N)[rows][n], T (&Q)[s][s]) {
  add_lower_product<first, len>(M, N, Q, Q);
}

/// out[r][:len] = sum_{l < count} coef(r, l) row(l)[:len] for r < R, R at a time: each of the count rows (a count
/// known at run time, rows given by pointers: row(l) one) loaded once for all R, the sums accumulated in local vectors
/// of the target's register width in the order of the rows (the same roundings on every target).
template <int R, int len, class T, class Coef, class Row>
void combine_pointed(Coef&& coef, Row&& row_at, int count, T (*out)[len]) {
  constexpr int lanes = row_lanes<T, len>(), vectors = vectors_over(len, lanes);
  using vec = typename Vector<T, lanes>::type;
  vec acc[R][vectors] = {};
  for (int l = 0; l < count; ++l) {
    const T* row = row_at(l);
    vec m[vectors];
    for (int j = 0; j < vectors; ++j) load(m[j], row + vector_start(j, len, lanes));
    for (int r = 0; r < R; ++r) {
      const T c = coef(r, l);
      for (int j = 0; j < vectors; ++j) acc[r][j] += c * m[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < vectors; ++j) store(out[r] + vector_start(j, len, lanes), acc[r][j]);
}

/// Q[i][:i+1] += sum_l w[l] a_l[i] a_l[:i+1] for i >= first: the lower triangle of the weighted Gram matrix A'WA of
/// `count` rows a_l (of length n, given by pointers) added to Q's, four rows of Q at a time, each in register blocks
/// of as many rows as keep their accumulators within 12 vector registers of 16, 20 of 32 (the loaded vectors of a_l
/// and a coefficient take the others: a dense constraint row's G'WG term, a vectorized product instead of one scalar
/// update of Q's triangle per row).
template <int first, int n, int s, class T>
void add_lower_gram(const T* const* a, const T* w, int count, T (&Q)[s][s]) {
  constexpr int end = first + 4 < n ? first + 4 : n;
  constexpr int per_row = vectors_over(end, row_lanes<T, end>());
  constexpr int budget = vector_registers >= 32 ? 20 : 12;
  constexpr int block = budget / per_row > 1 ? (budget / per_row < end - first ? budget / per_row : end - first) : 1;
  T row[end - first][end];
  const auto pointed = [&](int l) { return a[l]; };
  int r = 0;
  for (; r + block <= end - first; r += block)
    combine_pointed<block, end>([&](int b, int l) { return w[l] * a[l][first + r + b]; }, pointed, count, row + r);
  for (; r < end - first; ++r)
    combine_pointed<1, end>([&](int, int l) { return w[l] * a[l][first + r]; }, pointed, count, row + r);
  for (int i = first; i < end; ++i)
    for (int j = 0; j <= i; ++j) Q[i][j] += row[i - first][j];
  if constexpr (end < n) add_lower_gram<end, n, s>(a, w, count, Q);
}

// *** factorizations ***

/// Whether d is a Cholesky pivot: positive past the roundings of the sums before it (45 of them, in double or float).
template <class T>
bool positive_pivot(T d) {
  return d > anvil::by_precision<T>(1e-14, 5e-6f);
}

/// In-place Cholesky of an m x m matrix (lower triangle): L below the diagonal, the reciprocals 1 / L_jj on it (the
/// solves multiply by them: a division's latency, several times a multiplication's, would lie on every solve's chain
/// of dependent steps); false if not positive definite.
template <int m, class T>
bool cholesky(T (&M)[m][m]) {
  for (int j = 0; j < m; ++j) {
    T d = M[j][j];
    for (int k = 0; k < j; ++k) d -= M[j][k] * M[j][k];
    if (!positive_pivot(d)) return false;
    M[j][j] = T(1) / std::sqrt(d);
    for (int i = j + 1; i < m; ++i) {
      T s = M[i][j];
      for (int k = 0; k < j; ++k) s -= M[i][k] * M[j][k];
      M[i][j] = s * M[j][j];
    }
  }
  return true;
}

/// The solve with L' from its row k up (v[k] is final once scaled; v[j] for j < k then less L[k][j] v[k], a row of L
/// against the entries above, a vectorized loop of compile-time length): each entry's terms subtracted as the entries
/// are found, the last one found last. In the order of a dot product over L's column, each entry's sum starts from the
/// entry found last and waits for it: m chains of up to m dependent subtractions one after the other.
template <int k, int m, class T>
void solve_transposed_from(const T (&L)[m][m], T* v) {
  v[k] *= L[k][k];
  const T vk = v[k];
  for (int j = 0; j < k; ++j) v[j] -= L[k][j] * vk;
  if constexpr (k > 0) solve_transposed_from<k - 1, m>(L, v);
}

/// The number of rows from which the solve with L' runs as solve_transposed_from (below, each entry's sum over L's
/// column: chains of a few terms, where GCC's code for the short vector loops was slower).
inline constexpr int transposed_solve_rows = 8;

/// v <- L^-1 v, from cholesky's factor (reciprocals on its diagonal): row by row, each row's sum in the order of the
/// entries found.
template <int m, class T>
void solve_lower(const T (&L)[m][m], T* v) {
  for (int i = 0; i < m; ++i) {
    for (int k = 0; k < i; ++k) v[i] -= L[i][k] * v[k];
    v[i] *= L[i][i];
  }
}

/// v <- L'^-1 v, from cholesky's factor: from transposed_solve_rows rows on by solve_transposed_from; below, each
/// entry's sum over L's column.
template <int m, class T>
void solve_lower_transposed(const T (&L)[m][m], T* v) {
  if constexpr (m >= transposed_solve_rows) {
    solve_transposed_from<m - 1, m>(L, v);
  } else {
    for (int i = m - 1; i >= 0; --i) {
      for (int k = i + 1; k < m; ++k) v[i] -= L[k][i] * v[k];
      v[i] *= L[i][i];
    }
  }
}

/// v <- (L L')^-1 v, from cholesky's factor: solve_lower, then solve_lower_transposed.
template <int m, class T>
void cholesky_solve(const T (&L)[m][m], T* v) {
  solve_lower(L, v);
  solve_lower_transposed(L, v);
}

/// A = P'LU in place (partial pivoting: row k swapped with piv[k]), given the last column with a nonzero of each
/// row (last) and the last row of each column (bottom), and with the extents of the rows of L (first) and U (last)
/// after: the elimination and the solves skip the zeros outside them and below each column's last nonzero (a
/// banded matrix's factors keep to its band, twice as wide above the diagonal); false when a pivot is zero or not
/// finite.
template <int m, class real>
bool lu_factorize(real (&A)[m][m], int (&piv)[m], int (&first)[m], int (&last)[m], int (&bottom)[m]) {
  for (int i = 0; i < m; ++i) first[i] = i;
  for (int k = 0; k < m; ++k) {
    int best = k;
    for (int i = k + 1; i <= bottom[k]; ++i)
      if (std::fabs(A[i][k]) > std::fabs(A[best][k])) best = i;
    piv[k] = best;
    if (!(std::fabs(A[best][k]) > 0) || !std::isfinite(A[best][k])) return false;
    if (best != k) {
      for (int j = 0; j < m; ++j) {
        const real t = A[k][j];
        A[k][j] = A[best][j];
        A[best][j] = t;
      }
      for (int j = k + 1; j <= last[k]; ++j) bottom[j] = std::max(bottom[j], best);  // row k's nonzeros move down
      std::swap(first[k], first[best]);
      std::swap(last[k], last[best]);
    }
    const int end = last[k];
    for (int i = k + 1; i <= bottom[k]; ++i) {
      if (A[i][k] == real(0)) continue;
      const real l = A[i][k] /= A[k][k];
      first[i] = std::min(first[i], k);
      for (int j = k + 1; j <= end; ++j) A[i][j] -= l * A[k][j];
      last[i] = std::max(last[i], end);
    }
    for (int j = k + 1; j <= end; ++j) bottom[j] = std::max(bottom[j], bottom[k]);  // the fill
  }
  return true;
}

/// B = A^-1 B for B row-major m x W, with A factorized by lu_factorize.
template <int W, int m, class real>
void lu_solve(const real (&A)[m][m], const int (&piv)[m], const int (&first)[m], const int (&last)[m], real* B) {
  for (int k = 0; k < m; ++k)
    if (piv[k] != k)
      for (int c = 0; c < W; ++c) {
        const real t = B[k * W + c];
        B[k * W + c] = B[piv[k] * W + c];
        B[piv[k] * W + c] = t;
      }
  for (int i = 1; i < m; ++i)
    for (int j = first[i]; j < i; ++j)
      if (A[i][j] != real(0))
        for (int c = 0; c < W; ++c) B[i * W + c] -= A[i][j] * B[j * W + c];
  for (int i = m - 1; i >= 0; --i) {
    for (int j = i + 1; j <= last[i]; ++j)
      if (A[i][j] != real(0))
        for (int c = 0; c < W; ++c) B[i * W + c] -= A[i][j] * B[j * W + c];
    for (int c = 0; c < W; ++c) B[i * W + c] /= A[i][i];
  }
}

/// b = A'^-1 b, with A factorized by lu_factorize: U' t = b, L' q = t, b = P' q.
template <int m, class real>
void lu_solve_transposed(const real (&A)[m][m], const int (&piv)[m], real* b) {
  for (int i = 0; i < m; ++i) {
    real value = b[i];
    for (int j = 0; j < i; ++j)
      if (A[j][i] != real(0)) value -= A[j][i] * b[j];
    b[i] = value / A[i][i];
  }
  for (int i = m - 1; i >= 0; --i)
    for (int j = i + 1; j < m; ++j)
      if (A[j][i] != real(0)) b[i] -= A[j][i] * b[j];
  for (int k = m - 1; k >= 0; --k)
    if (piv[k] != k) {
      const real t = b[k];
      b[k] = b[piv[k]];
      b[piv[k]] = t;
    }
}

}  // namespace dense
}  // namespace anvil
#endif  // ANVIL_DENSE_HPP
