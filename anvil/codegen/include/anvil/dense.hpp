// anvil::dense: small dense kernels whose sizes are template parameters (the stage blocks of an OCP, an integrator's
// sensitivities). Every loop has a compile-time length and accumulates in local arrays, which compilers keep in
// vector registers; none allocates. Used by the Riccati QP (anvil/riccati.hpp) and the integrators' derivatives.
#ifndef ANVIL_DENSE_HPP
#define ANVIL_DENSE_HPP

namespace anvil {
namespace dense {

/// The bytes of the widest vector registers the target compiles for (GCC and clang predefine __AVX__, __SSE2__,
/// __ARM_NEON); 0 without any: the kernels are then plain loops.
#if defined(__AVX__)
inline constexpr int vector_bytes = 32;
#elif defined(__SSE2__) || defined(__ARM_NEON)
inline constexpr int vector_bytes = 16;
#else
inline constexpr int vector_bytes = 0;
#endif

/// out = sum_l a[l] M[l][:len], a combination of M's rows (their first len entries) accumulated in local vectors of
/// the target's register width (GCC's and clang's vector extension; the remainder in a local array): 1.4x (SSE2) to
/// 3x (AVX2) the speed of updating `out` in memory term by term. Plain loops over one local array are left to the
/// auto-vectorizer, which GCC 12 turns, for some lengths (8 and 16 of 12 rows and more), into a transposition of M
/// several times slower (combine_rows<12, 16>: 105 ns, with vectors 12 ns). Each entry sums its terms in the same
/// order either way (the same roundings).
template <int rows, int n, int len = n, class T>
void combine_rows(const T* a, const T (&M)[rows][n], T* out) {
  constexpr int per_vector = vector_bytes / static_cast<int>(sizeof(T));
  constexpr int lanes = per_vector > 1 ? per_vector : 1;
  constexpr int vectors = lanes > 1 ? len / lanes : 0, done = vectors * lanes, rest = len - done;
  if constexpr (vectors > 0) {
    typedef T vec __attribute__((vector_size(lanes * sizeof(T))));
    vec acc[vectors];
    for (int j = 0; j < vectors; ++j) {
      vec m;
      __builtin_memcpy(&m, &M[0][lanes * j], sizeof m);
      acc[j] = a[0] * m;
    }
    for (int l = 1; l < rows; ++l) {
      const T c = a[l];
      for (int j = 0; j < vectors; ++j) {
        vec m;
        __builtin_memcpy(&m, &M[l][lanes * j], sizeof m);
        acc[j] += c * m;
      }
    }
    __builtin_memcpy(out, acc, sizeof acc);
  }
  if constexpr (rest > 0) {
    T acc[rest];
    for (int j = 0; j < rest; ++j) acc[j] = a[0] * M[0][done + j];
    for (int l = 1; l < rows; ++l) {
      const T c = a[l];
      for (int j = 0; j < rest; ++j) acc[j] += c * M[l][done + j];
    }
    for (int j = 0; j < rest; ++j) out[done + j] = acc[j];
  }
}

/// out = M x (the first len columns of M): the products accumulated column by column in a local array, so the rows'
/// sums are independent chains (a dot product per row is one chain of dependent additions, which runs at the adder's
/// latency).
template <int rows, int n, int len = n, class T>
void multiply(const T (&M)[rows][n], const T* x, T* out) {
  T acc[rows];
  for (int i = 0; i < rows; ++i) acc[i] = M[i][0] * x[0];
  for (int j = 1; j < len; ++j) {
    const T c = x[j];
    for (int i = 0; i < rows; ++i) acc[i] += M[i][j] * c;
  }
  for (int i = 0; i < rows; ++i) out[i] = acc[i];
}

/// Q[i][:i+1] += (M'N)[i][:i+1] for i >= first: the lower triangle of M'N added to Q's, four rows at a time, each
/// row computed up to the block's last column (compile-time lengths, so the rows stay in registers).
template <int first, int rows, int n, int s, class T>
void add_lower_product(const T (&M)[rows][n], const T (&N)[rows][n], T (&Q)[s][s]) {
  constexpr int end = first + 4 < n ? first + 4 : n;
  for (int i = first; i < end; ++i) {
    T a[rows], row[end];
    for (int l = 0; l < rows; ++l) a[l] = M[l][i];
    combine_rows<rows, n, end>(a, N, row);
    for (int j = 0; j <= i; ++j) Q[i][j] += row[j];
  }
  if constexpr (end < n) add_lower_product<end, rows, n, s>(M, N, Q);
}

/// out[r][:len] = sum_{l < count} coef(r, l) rows[l][:len] for r < R, R at a time: each of the count rows (a count
/// known at run time, rows given by pointers) loaded once for all R, the sums accumulated in local vectors of the
/// target's register width in the order of the rows (the same roundings on every target).
template <int R, int len, class T, class Coef>
void combine_pointed(Coef&& coef, const T* const* rows, int count, T (*out)[len]) {
  constexpr int per_vector = vector_bytes / static_cast<int>(sizeof(T));
  constexpr int lanes = per_vector > 1 ? per_vector : 1;
  constexpr int vectors = lanes > 1 ? len / lanes : 0, done = vectors * lanes, rest = len - done;
  typedef T vec __attribute__((vector_size(lanes * sizeof(T))));
  vec acc[R][vectors > 0 ? vectors : 1] = {};
  T tail[R][rest > 0 ? rest : 1] = {};
  for (int l = 0; l < count; ++l) {
    const T* row = rows[l];
    vec m[vectors > 0 ? vectors : 1];
    for (int j = 0; j < vectors; ++j) __builtin_memcpy(&m[j], row + lanes * j, sizeof(vec));
    for (int r = 0; r < R; ++r) {
      const T c = coef(r, l);
      for (int j = 0; j < vectors; ++j) acc[r][j] += c * m[j];
      for (int j = 0; j < rest; ++j) tail[r][j] += c * row[done + j];
    }
  }
  for (int r = 0; r < R; ++r) {
    if constexpr (vectors > 0) __builtin_memcpy(out[r], acc[r], sizeof acc[r]);
    for (int j = 0; j < rest; ++j) out[r][done + j] = tail[r][j];
  }
}

/// Q[i][:i+1] += sum_l w[l] a_l[i] a_l[:i+1] for i >= first: the lower triangle of the weighted Gram matrix A'WA of
/// `count` rows a_l (of length n, given by pointers) added to Q's, four rows of Q at a time, each in register blocks
/// of as many rows as keep their accumulators within 12 vector registers (a dense constraint row's G'WG term: a
/// vectorized product instead of one scalar update of Q's triangle per row).
template <int first, int n, int s, class T>
void add_lower_gram(const T* const* a, const T* w, int count, T (&Q)[s][s]) {
  constexpr int end = first + 4 < n ? first + 4 : n;
  constexpr int per_vector = vector_bytes / static_cast<int>(sizeof(T));
  constexpr int per_row = per_vector > 1 ? (end + per_vector - 1) / per_vector : end;
  constexpr int block = 12 / per_row > 1 ? (12 / per_row < end - first ? 12 / per_row : end - first) : 1;
  T row[end - first][end];
  int r = 0;
  for (; r + block <= end - first; r += block)
    combine_pointed<block, end>([&](int b, int l) { return w[l] * a[l][first + r + b]; }, a, count, row + r);
  for (; r < end - first; ++r)
    combine_pointed<1, end>([&](int, int l) { return w[l] * a[l][first + r]; }, a, count, row + r);
  for (int i = first; i < end; ++i)
    for (int j = 0; j <= i; ++j) Q[i][j] += row[i - first][j];
  if constexpr (end < n) add_lower_gram<end, n, s>(a, w, count, Q);
}

}  // namespace dense
}  // namespace anvil
#endif  // ANVIL_DENSE_HPP
