// anvil::qp::Riccati: an interior-point solver for QPs with the stage structure of an optimal control problem.
//
//   min  sum_k 1/2 z_k'H_k z_k + g_k'z_k + 1/2 z_N'H_N z_N + g_N'z_N,   z_k = [x_k; u_k],  z_N = [x_N; u_N]
//   s.t. x_0 = x0,  x_{k+1} = A_k x_k + B_k u_k + c_k,  lo_k <= G_k z_k <= hi_k,  loN <= G_N z_N <= hiN
//
// Mehrotra's predictor-corrector interior point (anvil/interior_point.hpp: the loop and the rows, equalities
// included); each Newton system is an LQ problem solved by a Riccati recursion over the stages (factored once per
// iteration, solved twice: predictor and corrector), O(N (nx + nu)^3). u_N are inputs at the last stage (nuN of them,
// e.g. the slacks of soft terminal constraints) that enter no dynamics.
//
// The stages form a chain (stage k + 1 follows stage k) or a tree (Tree): each stage then has a parent, and transition
// k (A_k, B_k, c_k, its multiplier pi_k) leads into stage k + 1 from that parent: a scenario tree of multi-stage robust
// MPC, whose branches share the stages before they split. The recursion runs over the tree (a stage's value function
// sums its children's), O(stages (nx + nu)^3) either way.
//
// Sizes are template parameters: every loop has compile-time bounds and the workspace is plain arrays, allocated by
// the caller (no heap use at all). Rows are used through their nonzeros, found at the start of each solve: a bound on
// one variable (most rows of an OCP) costs one entry, not a dense row, in every product and in the Hessian's G'WG;
// with `boxes`, each variable's bound row is implied (not stored, not scanned) and G holds only the other rows.
#ifndef ANVIL_RICCATI_HPP
#define ANVIL_RICCATI_HPP
#include <cmath>
#include <cstring>
#include <type_traits>

#include "anvil/dense.hpp"
#include "anvil/interior_point.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace qp {
namespace riccati {

/// Rows j0 to j0 + R - 1 (R = block_rows, or the rows left) of U = L' and of V (eliminate_inputs), left-looking: the
/// block's rows of Q_uu (S, both triangles) and of Q_ux less the finished rows' terms (one pass for the R rows:
/// dense::subtract_combinations; none in the first block), then, row after row, the terms of the block's rows before
/// it, the pivot and the scale; then the next block. Each entry's terms are subtracted in the order of the rows, as a
/// column-by-column Cholesky and a row-by-row solve subtract them (the same roundings); of U, only the diagonal and
/// the entries right of it are read.
template <int j0, int nx, int m, class T>
bool factor_inputs(const T (&Q)[nx + m][nx + m], const T (&S)[m][m], T (&U)[m][m], T (&V)[m][nx]) {
  constexpr int R = m - j0 < dense::block_rows ? m - j0 : dense::block_rows, len = m - j0;
  const auto u_start = [&](int r) { return (j0 > 0 ? U[j0 + r] : S[j0 + r]) + j0; };  // the rows after that pass
  const auto v_start = [&](int r) { return j0 > 0 ? V[j0 + r] : Q[nx + j0 + r]; };
  if constexpr (j0 > 0) {
    const auto one = [](int) { return T(1); };
    const auto above = [&](int r, int k) { return U[k][j0 + r]; };  // L's row j0 + r, column k
    dense::subtract_combinations<R, len, T>([&](int r) { return S[j0 + r] + j0; }, above,
                                            [&](int k) { return U[k] + j0; }, j0, one,
                                            [&](int r) { return U[j0 + r] + j0; });
    dense::subtract_combinations<R, nx, T>([&](int r) { return Q[nx + j0 + r]; }, above, [&](int k) { return V[k]; },
                                           j0, one, [&](int r) { return V[j0 + r]; });
  }
  for (int r = 0; r < R; ++r) {
    const int j = j0 + r;
    T d = u_start(r)[r];
    for (int s = j0; s < j; ++s) d -= U[s][j] * U[s][j];
    if (!dense::positive_pivot(d)) return false;
    const T inv = T(1) / std::sqrt(d);
    const auto in_block = [&](int, int s) { return U[j0 + s][j]; };
    const auto scale = [&](int) { return inv; };
    dense::subtract_combinations<1, len, T>([&](int) { return u_start(r); }, in_block,
                                            [&](int s) { return U[j0 + s] + j0; }, r, scale,
                                            [&](int) { return U[j] + j0; });
    dense::subtract_combinations<1, nx, T>([&](int) { return v_start(r); }, in_block, [&](int s) { return V[j0 + s]; },
                                           r, scale, [&](int) { return V[j]; });
    U[j][j] = inv;
  }
  if constexpr (j0 + R < m) return factor_inputs<j0 + R, nx, m>(Q, S, U, V);
  return true;
}

/// The Cholesky factor L of Q_uu (dense::cholesky's form) and V = L^-1 Q_ux, for eliminate_inputs: where V's rows
/// fill a vector of the target's width (8 doubles with AVX-512), by factor_inputs (U = L' in blocks of rows, then L);
/// below (a few states), column by column (dense::cholesky), then V row by row: with rows shorter than a vector, the
/// blocked passes' vectors are too short to pay for the copies into and out of U. The same roundings either way.
template <int nx, int m, class T>
bool factor_and_solve(const T (&Q)[nx + m][nx + m], T (&L)[m][m], T (&V)[m][nx]) {
  if constexpr (nx >= dense::vector_bytes / static_cast<int>(sizeof(T)) && dense::vector_bytes > 0) {
    T S[m][m], U[m][m];  // Q_uu, both triangles; L'
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) S[i][j] = S[j][i] = Q[nx + i][nx + j];
    if (!factor_inputs<0, nx, m>(Q, S, U, V)) return false;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) L[i][j] = U[j][i];
  } else {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) L[i][j] = Q[nx + i][nx + j];
    if (!dense::cholesky(L)) return false;
    for (int i = 0; i < m; ++i)
      dense::subtract_rows<nx>(Q[nx + i], [&](int k) { return L[i][k]; }, V, i, L[i][i], V[i]);
  }
  return true;
}

/// Whether a stage of m inputs keeps V = L^-1 Q_ux in place of its feedback K = -L'^-1 V: from
/// dense::transposed_solve_rows inputs on, where the solve with L' is vectorized, one such solve a stage in each
/// rollout costs less than forming K in each factorization (a triangular solve with nx right-hand sides).
template <int m>
inline constexpr bool keeps_v = m >= dense::transposed_solve_rows;

/// The feedback K = -L'^-1 V from the Cholesky factor L of Q_uu and V = L^-1 Q_ux: a triangular solve on whole rows of
/// nx (vectorized), each row's terms in the order of the rows below it.
template <int nx, int m, class T>
void feedback_gain(const T (&L)[m][m], const T (&V)[m][nx], T (&K)[m][nx]) {
  T W[m][nx];  // -V
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < nx; ++j) W[i][j] = -V[i][j];
  for (int i = m - 1; i >= 0; --i)
    dense::subtract_rows<nx>(W[i], [&](int k) { return L[i + 1 + k][i]; }, K + i + 1, m - 1 - i, L[i][i], K[i]);
}

/// Minimizes the quadratic of Hessian Q (in [x; u] order, m inputs; only its lower triangle is read) over u: the
/// Cholesky factor L of Q_uu (dense::cholesky's form), the feedback's factor F (K = -Q_uu^-1 Q_ux, or V = L^-1 Q_ux
/// where keeps_v<m>) and the value function's Hessian P = Q_xx + Q_ux'K = Q_xx - V'V (factor_and_solve; a symmetric
/// update, computed on the lower triangle and mirrored). False if Q_uu is not positive definite (the reduced Hessian
/// is not).
template <int nx, int m, class T>
bool eliminate_inputs(const T (&Q)[nx + m][nx + m], T (&L)[m][m], T (&F)[m][nx], T (&P)[nx][nx]) {
  T V[m][nx], W[m][nx];  // W = -V
  if (!factor_and_solve<nx, m>(Q, L, V)) return false;
  if constexpr (keeps_v<m>) {
    std::memcpy(F, V, sizeof V);
  } else {
    feedback_gain<nx, m>(L, V, F);
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < nx; ++j) W[i][j] = -V[i][j];
  dense::add_lower_product<0>(V, W, Q, P);
  for (int i = 0; i < nx; ++i)
    for (int j = 0; j < i; ++j) P[j][i] = P[i][j];
  return true;
}

/// The value function's gradient p = qx + K'qu and the feedforward kk = -Q_uu^-1 qu (qu is overwritten), from
/// eliminate_inputs' L and F; where F keeps V, p = qx - V'y with y = L^-1 qu, and kk keeps y (the rollout ends the
/// solve: feedback).
template <int nx, int m, class T>
void feedforward(const T* qx, T* qu, const T (&L)[m][m], const T (&F)[m][nx], T* p, T* kk) {
  if constexpr (keeps_v<m>) {
    dense::solve_lower(L, qu);
    dense::combine_rows<m, nx>(qu, F, p);
    for (int i = 0; i < nx; ++i) p[i] = qx[i] - p[i];
    for (int i = 0; i < m; ++i) kk[i] = qu[i];
  } else {
    dense::combine_rows<m, nx>(qu, F, p);
    for (int i = 0; i < nx; ++i) p[i] += qx[i];
    anvil::dense::cholesky_solve(L, qu);
    for (int i = 0; i < m; ++i) kk[i] = -qu[i];
  }
}

/// The inputs' step du = K dx + kk, given du = F dx + kk (feedforward's kk): as is where F is K; where F keeps V,
/// du = -L'^-1 (V dx + y).
template <int m, class T>
void finish_feedback(const T (&L)[m][m], T* du) {
  if constexpr (keeps_v<m>) {
    dense::solve_lower_transposed(L, du);
    for (int i = 0; i < m; ++i) du[i] = -du[i];
  }
}

/// An index below n in the fewest bytes (most OCP stages have fewer than 256 variables and rows).
template <int n>
using index_t = std::conditional_t<(n <= 255), unsigned char, std::conditional_t<(n <= 65535), unsigned short, int>>;

/// The nonzero columns of one row of G (of length n), in increasing order.
template <int n>
struct Pattern {
  index_t<n> count;
  index_t<n> index[n];

  /// Finds the nonzeros of a row with a bound; a row without one takes no part in the iterations (an empty pattern:
  /// most rows of an OCP, the state boxes without bounds, are scanned no further).
  template <class T>
  void find(const T* a, same_t<T> lo, same_t<T> hi) {
    count = 0;
    if (!(lo > -T(ipm::no_bound) || hi < T(ipm::no_bound))) return;
    for (int j = 0; j < n; ++j) {
      index[count] = static_cast<index_t<n>>(j);
      count = static_cast<index_t<n>>(count + (a[j] != 0));
    }
  }

  /// a'[x; y] where x holds the first m entries (a dense row's over all its entries, [x; y] gathered first, in four
  /// interleaved sums: dense::interleaved_dot).
  template <int m, class T>
  T dot(const T* a, const T* x, const T* y) const {
    if (dense()) {
      T z[n];
      for (int j = 0; j < m; ++j) z[j] = x[j];
      for (int j = m; j < n; ++j) z[j] = y[j - m];
      return anvil::dense::interleaved_dot<n>(a, z);
    }
    T v = 0;
    for (int e = 0; e < count; ++e) {
      const int j = index[e];
      v += a[j] * (j < m ? x[j] : y[j - m]);
    }
    return v;
  }

  /// r += a e
  template <class T>
  void add(const T* a, same_t<T> e, T* r) const {
    if (dense()) {
      for (int j = 0; j < n; ++j) r[j] += a[j] * e;
    } else {
      for (int c = 0; c < count; ++c) r[index[c]] += a[index[c]] * e;
    }
  }

  /// M += a w a' (the lower triangle, M's rows and columns ordered as a's entries)
  template <int s, class T>
  void add_outer(const T* a, same_t<T> w, T (&M)[s][s]) const {
    for (int c = 0; c < count; ++c) {
      const int i = index[c];
      for (int e = 0; e <= c; ++e) M[i][index[e]] += a[i] * w * a[index[e]];
    }
  }

  /// Whether the row's a w a' is added as part of a Gram product (dense::add_lower_gram, vectorized over whole rows)
  /// rather than entry by entry: from a third of its entries nonzero on (a condensed block's rows of inner states).
  bool dense() const { return 3 * count >= n; }
};

/// The weighted rows of one stage whose a w a' terms are added to its Hessian together (dense rows, Pattern::dense):
/// Q += A'WA in one vectorized product. At most cap of them.
template <int n, int cap, class T>
struct Gram {
  const T* row[cap];
  T weight[cap];
  int count = 0;

  /// Q += sum of w a a' over the rows added (the lower triangle).
  template <int s>
  void add_to(T (&Q)[s][s]) const {
    if (count > 0) dense::add_lower_gram<0, n, s>(row, weight, count, Q);
  }
};

/// A stage solver's solve() (Riccati's, Condensed's): S::solve_in_place, then the Solution from the iterate it
/// leaves in ws (x, u, uN, pi and the rows).
template <class S>
int solve(const typename S::Data& d, typename S::real tol, int max_iter, typename S::Solution& sol,
          typename S::Workspace& ws, bool warm_start) {
  const double start = anvil::now();
  ipm::Residuals<typename S::real> res;
  int it = 0;
  const int status = S::solve_in_place(d, tol, max_iter, ws, warm_start, res, it);
  sol.residual_stationarity = res.stationarity;
  sol.residual_equality = res.equality;
  sol.residual_inequality = res.inequality;
  sol.complementarity = res.complementarity;
  for (int k = 0; k <= S::N; ++k)
    for (int i = 0; i < S::nx; ++i) sol.x[k][i] = ws.x[k][i];
  for (int k = 0; k < S::N; ++k) {
    for (int i = 0; i < S::nu; ++i) sol.u[k][i] = ws.u[k][i];
    for (int i = 0; i < S::nx; ++i) sol.pi[k][i] = ws.pi[k][i];
    for (int m = 0; m < S::mg; ++m) sol.lam[k][m] = S::multiplier(ws.rows[k][m]);
  }
  for (int m = 0; m < S::mgN; ++m) sol.lamN[m] = S::multiplier(ws.rowsN[m]);
  for (int i = 0; i < S::muN; ++i) sol.uN[i] = ws.uN[i];
  sol.status = status;
  sol.iterations = it;
  sol.solve_time = anvil::now() - start;
  return status;
}

}  // namespace riccati

/// The stages of a horizon in a chain: stage k + 1 follows stage k (transition k leads out of stage k).
struct Chain {
  static constexpr bool tree = false;
  /// The stage whose variables stage `node`'s states follow from (node >= 1).
  static constexpr int parent(int node) { return node - 1; }
  /// f(e) for each transition e out of stage k < N (transition e leads into stage e + 1).
  template <class F>
  static void for_transitions_from(int k, F&& f) {
    f(k);
  }
};

/// The stages of a tree: parents[k] (-1 at the root, stage 0; else below k), and each stage's transitions out,
/// edges[first[k]] to edges[first[k + 1] - 1] in increasing order (Chain's functions, on the tree).
template <const int* parents, const int* first, const int* edges>
struct Tree {
  static constexpr bool tree = true;
  static constexpr int parent(int node) { return parents[node]; }
  /// The first stage following stage k (-1: none, a leaf).
  static constexpr int first_child(int k) { return first[k] < first[k + 1] ? edges[first[k]] + 1 : -1; }
  template <class F>
  static void for_transitions_from(int k, F&& f) {
    for (int i = first[k]; i < first[k + 1]; ++i) f(edges[i]);
  }
};

/// The solver for one set of sizes: states nx, inputs nu and horizon N; ng rows per stage k < N and ngN at stage N;
/// nuN inputs at stage N; only the first nud inputs enter the dynamics (the columns of B after them are zero, e.g.
/// the slacks of soft constraints), so the recursion's products skip the rest. With `boxes`, the first nz rows of
/// each stage k < N (nzN at stage N) are the bounds of its variables, row j of z_k: G stores only the rows after
/// them (an OCP's boxes: no unit rows stored, scanned or loaded). `Topology`: Chain, or a Tree of the stages (stage N
/// one of its leaves).
template <int nx_, int nu_, int N_, int ng_, int ngN_ = 0, int nuN_ = 0, int nud_ = nu_, class T = double,
          bool boxes = false, bool quadratic_prices = false, class Topology = Chain>
struct Riccati {
  using real = T;  ///< the scalar type the solver computes in (double, or float for a float32 controller)
  static_assert(nx_ >= 1 && nu_ >= 1 && N_ >= 1 && ng_ >= 0 && ngN_ >= 0 && nuN_ >= 0 && nud_ >= 0 && nud_ <= nu_,
                "invalid OCP QP sizes");
  static constexpr int nx = nx_, nu = nu_, nz = nx + nu, N = N_;
  static constexpr int nud = nud_;     ///< inputs entering the dynamics
  static constexpr int nd = nx + nud;  ///< the columns of [A B] that may be nonzero
  static constexpr int ng = ng_;    ///< inequality rows per stage k < N
  static constexpr int ngN = ngN_;  ///< inequality rows at stage N
  static constexpr int nuN = nuN_;  ///< inputs at stage N
  static constexpr int nzN = nx + nuN;
  static constexpr int mg = ng > 0 ? ng : 1;  ///< stored rows (at least one, for valid C++ arrays)
  static constexpr int mgN = ngN > 0 ? ngN : 1;
  static constexpr int nb = boxes ? nz : 0, nbN = boxes ? nzN : 0;  ///< box rows (stage k < N, stage N)
  static_assert(ng >= nb && ngN >= nbN, "the box rows are rows of their stage");
  static constexpr int mG = ng - nb > 0 ? ng - nb : 1;  ///< stored rows of G (those after the boxes)
  static constexpr int mGN = ngN - nbN > 0 ? ngN - nbN : 1;
  static constexpr int muN = nuN > 0 ? nuN : 1;
  static constexpr bool box_rows = boxes, squared_prices = quadratic_prices;  ///< the template's flags
  using Stages = Topology;  ///< how the stages follow each other
  /// Whether a solve keeps [A B] (Workspace::AB): the factorization's operand, and the rows the products [A B] z
  /// (dense::multiply: a dot per row, a block of rows sharing each loaded vector of z) and [A B]'v (combinations of its
  /// rows) read in place rather than gathered from A and B, row by row, at every stage and iteration (with A's rows
  /// strided, a product compiles to scalar code): from nx = 8 on (below, gathering costs no more, and a
  /// microcontroller's memory counts more). No transposed copy is kept for [A B] z: the solve's data must stay in the
  /// core's cache, and a second copy of [A B] is as large as the first.
  static constexpr bool stacked_dynamics = nx >= 8;
  /// The tightest tolerance a solve is held to: none in double; in float, 1e-4 (tighter, the slacks of active rows
  /// shrink until the weights l/t swamp the factorization's precision and a convex QP looks nonconvex)
  static constexpr T tol_floor = anvil::by_precision<T>(0.0, 1e-4f);
  static constexpr bool mehrotra_start = false;  ///< cold starts: x_k = x0, each side's slack its distance (>= 1)

  /// The QP's data (row-major blocks; H and HN symmetric; ±HUGE_VAL bounds mean none; lo == hi makes a row an
  /// equality; B's columns from nud on must be zero; with boxes, G and GN hold the rows after the box rows).
  struct Data {
    T H[N][nz][nz], g[N][nz], HN[nzN][nzN], gN[nzN];
    T A[N][nx][nx], B[N][nx][nu], c[N][nx], x0[nx];
    T G[N][mG][nz], lo[N][mg], hi[N][mg];
    T GN[mGN][nzN], loN[mgN], hiN[mgN];
    T z[N][mg], zN[mgN];  ///< elastic rows: the price of a unit of violation (0: a hard row)
    /// with quadratic_prices, elastic rows' price of the squared violation (w s^2 / 2; else one unused entry each)
    T w[quadratic_prices ? N : 1][quadratic_prices ? mg : 1], wN[quadratic_prices ? mgN : 1];
  };

  /// Row m's prices at stage k < N, and at stage N.
  static ipm::Price<T> price(const Data& d, int k, int m) {
    return {d.z[k][m], quadratic_prices ? d.w[k][m] : T(0)};
  }
  static ipm::Price<T> final_price(const Data& d, int m) { return {d.zN[m], quadratic_prices ? d.wN[m] : T(0)}; }

  /// The solution: primal, dynamics multipliers pi_k (of x_{k+1} = ...), row multipliers (lam = lam_hi - lam_lo:
  /// positive at an active upper bound, negative at an active lower one, as OSQP's; an equality row's free
  /// multiplier).
  struct Solution {
    T x[N + 1][nx], u[N][nu], pi[N][nx], lam[N][mg], lamN[mgN], uN[muN];
    int status = numerical_error, iterations = 0;
    T residual_stationarity = 0.0, residual_equality = 0.0, residual_inequality = 0.0, complementarity = 0.0;
    double solve_time = 0.0;  ///< seconds (anvil::now(): 0 where timing is compiled out)
  };

  /// Iterates, steps and the Riccati factorization (no allocation: plain arrays; the iterate's arrays x, u, uN and pi
  /// come first, in this order: a solve_in_place's solution read as one array of reals).
  struct Workspace {
    T x[N + 1][nx], u[N][nu], uN[muN], pi[N][nx];
    T dx[N + 1][nx], du[N][nu], duN[muN];
    ipm::Row<T> rows[N][mg], rowsN[mgN];
    riccati::Pattern<nz> pattern[N][mG];  ///< the nonzeros of G_k's stored rows (a box row's is its variable)
    riccati::Pattern<nzN> patternN[mGN];
    riccati::index_t<mg> live[N][mg];  ///< the rows with a bound (the others are skipped)
    riccati::index_t<mgN> liveN[mgN];
    int n_live[N], n_liveN;
    T r_z[N][nz], r_N[nzN], r_dyn[N][nx];
    T Pb[N][nx];  ///< P_{k+1} r_dyn_k, from the predictor's Newton step (its corrector's too)
    /// the factorization: P, L, the feedback's factor F (K, or V: riccati::eliminate_inputs) and, from the last Newton
    /// step, p and k (riccati::feedforward's kk)
    T P[N + 1][nx][nx], p[N + 1][nx], L[N][nu][nu], F[N][nu][nx], k[N][nu], LN[muN][muN], FN[muN][nx], kN[muN];
    /// [A_k B_k] (the inputs that enter the dynamics; with stacked_dynamics, else one unused entry), set at the start
    /// of each solve
    T AB[stacked_dynamics ? N : 1][stacked_dynamics ? nx : 1][stacked_dynamics ? nd : 1];
    bool warm;  ///< the iterates hold a solution a warm start can begin from
  };

  /// Solves the QP to tolerance tol (stationarity, equality, inequality residuals and complementarity, infinity
  /// norms) in at most max_iter iterations, from a cold start, or with warm_start from the previous solution kept in
  /// ws (when there is one). Never allocates; returns the status (also in sol.status).
  static int solve(const Data& d, T tol, int max_iter, Solution& sol, Workspace& ws, bool warm_start) {
    return riccati::solve<Riccati>(d, tol, max_iter, sol, ws, warm_start);
  }

  /// solve() leaving the solution in ws (x, u, uN, pi; a row's multiplier: multiplier(ws.rows[k][m]); r_z and r_N:
  /// the stationarity residuals there, x_0's included), the residual norms in res and the iterations in it; past
  /// `deadline` (anvil::now(); 0: none) it stops as at max_iter.
  static int solve_in_place(const Data& d, T tol, int max_iter, Workspace& ws, bool warm_start,
                            ipm::Residuals<T>& res, int& it, double deadline = 0.0) {
    tol = std::fmax(tol, tol_floor);
    const bool warm = warm_start && ws.warm;
    initialize(d, warm, ws);
    it = 0;
    const int status = ipm::mehrotra<Riccati>(d, tol, max_iter, warm, ws, res, it, deadline);
    ws.warm = status == solved;
    return status;
  }

  /// A row's multiplier lam_hi - lam_lo (an equality's free one).
  static T multiplier(const ipm::Row<T>& r) { return r.hi.l - r.lo.l; }

  /// The next solve starts cold.
  static void reset(Workspace& ws) { ws.warm = false; }

  /// Stage 0's feedback gain K_0 = -Q_uu^-1 Q_ux of the last factorization (formed here where the stage keeps V).
  static void feedback_gain(const Workspace& ws, T (&K)[nu][nx]) {
    if constexpr (riccati::keeps_v<nu>) {
      riccati::feedback_gain<nx, nu>(ws.L[0], ws.F[0], K);
    } else {
      std::memcpy(K, ws.F[0], sizeof K);
    }
  }

  /// Prepares a warm start for the next QP of a receding horizon, in step form (an SQP's, whose zero is the guess
  /// shifted by one stage): the multipliers and the rows' slacks move one stage earlier (the last stage keeps its
  /// own), the primal steps start from zero. The next solve with warm_start begins there if the last one was solved.
  static void shift(Workspace& ws) {
    // NOTE: in a tree, each stage takes its first child's (a scenario tree's root, its first branch's)
    for (int k = 0; k < N; ++k) {
      if (const int next = first_child(k + 1); next > 0) {  // transition k leads into stage k + 1
        for (int i = 0; i < nx; ++i) ws.pi[k][i] = ws.pi[next - 1][i];
      }
      if (const int next = first_child(k); next > 0 && next < N) {  // stage N's rows are not a stage's
        for (int m = 0; m < mg; ++m) ws.rows[k][m] = ws.rows[next][m];
      }
    }
    for (int k = 0; k <= N; ++k)
      for (int i = 0; i < nx; ++i) ws.x[k][i] = 0.0;
    for (int k = 0; k < N; ++k)
      for (int i = 0; i < nu; ++i) ws.u[k][i] = 0.0;
    for (int i = 0; i < muN; ++i) ws.uN[i] = 0.0;
  }

  /// Whether the QP's Hessian plus regularization I is positive definite on the null space of its equalities (the
  /// dynamics, x_0 = x0 and the rows with lo == hi): the Riccati factorization with those rows alone, weighted as
  /// the interior point weighs equalities. An inertia test before a solve, as a KKT factorization's, in the solver's
  /// own memory; the iterates a warm start begins from are left alone.
  static bool convex_on_equalities(const Data& d, T regularization, Workspace& ws) {
    find_patterns(d, ws);
    constexpr T weight = T(1) / ipm::equality_regularization<T>;
    const auto terminal = [&](auto&& add) {
      for (int m = 0; m < ngN; ++m)
        if (ipm::is_equality(d.loN[m], d.hiN[m])) add(m, weight);
    };
    const auto stage = [&](int k, auto&& add) {
      for (int m = 0; m < ng; ++m)
        if (ipm::is_equality(d.lo[k][m], d.hi[k][m])) add(m, weight);
    };
    return factor_weighted(d, ws, regularization, terminal, stage);
  }

  /// f(row) for every row with a bound, stage by stage (the rows without one are inert: nothing to update).
  template <class W, class F>
  static void for_rows(W& ws, F&& f) {
    for (int k = 0; k < N; ++k)
      for (int e = 0; e < ws.n_live[k]; ++e) f(ws.rows[k][ws.live[k][e]]);
    for (int e = 0; e < ws.n_liveN; ++e) f(ws.rowsN[ws.liveN[e]]);
  }

 private:
  template <class S, class D, class W>
  friend int ipm::mehrotra(const D& d, typename S::real tol, int max_iter, bool warm, W& ws,
                           ipm::Residuals<typename S::real>& res, int& iterations, double deadline);
  template <class S, class D, class W>
  friend int ipm::active_set_step(const D& d, W& ws, typename S::real tol, int max_factorizations,
                                  ipm::Residuals<typename S::real>& res, double deadline);

  /// The first stage following stage k (-1: none).
  static constexpr int first_child(int k) {
    if constexpr (Topology::tree) {
      return Topology::first_child(k);
    } else {
      return k < N ? k + 1 : -1;
    }
  }

  // One stage's row m, given the stage's stored rows (G, their patterns) after its n_box box rows: a box row's value,
  // gradient and Hessian terms are its variable's (stage N's rows: G_N, patternN, nbN).

  /// a'[x; u] for the row a
  template <int n>
  static T value_of(const riccati::Pattern<n>* pattern, const T (*G)[n], int n_box, int m, const T* x, const T* u) {
    if (m < n_box) return m < nx ? x[m] : u[m - nx];
    return pattern[m - n_box].template dot<nx>(G[m - n_box], x, u);
  }

  /// v[e] = a'[x; u] for each listed row a (live[e], e < count): box rows their variable, sparse rows their nonzeros'
  /// sum, the dense rows together over [x; u] gathered once (dense::interleaved_dots: each row's value as
  /// Pattern::dot's, the same roundings).
  template <int cap, int n, class Index>
  static void values_of(const riccati::Pattern<n>* pattern, const T (*G)[n], int n_box, const Index* live, int count,
                        const T* x, const T* u, T* v) {
    const T* rows[cap];
    int at[cap], n_dense = 0;
    for (int e = 0; e < count; ++e) {
      const int m = live[e];
      if (m >= n_box && pattern[m - n_box].dense()) {
        rows[n_dense] = G[m - n_box];
        at[n_dense++] = e;
      } else {
        v[e] = value_of(pattern, G, n_box, m, x, u);
      }
    }
    if (n_dense == 0) return;
    T z[n], values[cap];
    for (int j = 0; j < nx; ++j) z[j] = x[j];
    for (int j = nx; j < n; ++j) z[j] = u[j - nx];
    dense::interleaved_dots<dense::block_rows, n>(rows, n_dense, z, values);
    for (int c = 0; c < n_dense; ++c) v[at[c]] = values[c];
  }

  /// The values of stage k's rows with a bound (values_of), at [x; u].
  static void stage_values(const Data& d, const Workspace& ws, int k, const T* x, const T* u, T* v) {
    values_of<mG>(ws.pattern[k], d.G[k], nb, ws.live[k], ws.n_live[k], x, u, v);
  }

  /// The values of stage N's rows with a bound (values_of), at [x; u].
  static void final_values(const Data& d, const Workspace& ws, const T* x, const T* u, T* v) {
    values_of<mGN>(ws.patternN, d.GN, nbN, ws.liveN, ws.n_liveN, x, u, v);
  }

  /// r += e a
  template <int n>
  static void add_to(const riccati::Pattern<n>* pattern, const T (*G)[n], int n_box, int m, T e, T* r) {
    if (m < n_box) {
      r[m] += e;
    } else {
      pattern[m - n_box].add(G[m - n_box], e, r);
    }
  }

  /// Q += sum of a w a' (the lower triangle) over the rows that rows(add) weighs, calling add(row, weight) for each:
  /// box rows on Q's diagonal, sparse rows entry by entry, dense rows (at most cap) in one Gram product at the end.
  template <int cap, int n, class Rows>
  static void add_weighted_rows(const riccati::Pattern<n>* pattern, const T (*G)[n], int n_box, T (&Q)[n][n],
                                Rows&& rows) {
    riccati::Gram<n, cap, T> dense;
    rows([&](int m, T w) {
      if (m < n_box) {
        Q[m][m] += w;
      } else if (pattern[m - n_box].dense()) {
        dense.row[dense.count] = G[m - n_box];
        dense.weight[dense.count++] = w;
      } else {
        pattern[m - n_box].add_outer(G[m - n_box], w, Q);
      }
    });
    dense.add_to(Q);
  }

  /// G_k's row m times [x; u].
  static T row_value(const Data& d, const Workspace& ws, int k, int m, const T* x, const T* u) {
    return value_of(ws.pattern[k], d.G[k], nb, m, x, u);
  }

  /// G_N's row m times [x; u].
  static T final_row_value(const Data& d, const Workspace& ws, int m, const T* x, const T* u) {
    return value_of(ws.patternN, d.GN, nbN, m, x, u);
  }

  /// r += [A_k B_k]'v
  static void add_dynamics_transposed(const Data& d, const Workspace& ws, int k, const T* v, T* r) {
    if constexpr (stacked_dynamics) {
      T ab[nd];
      dense::combine_rows<nx, nd>(v, ws.AB[k], ab);
      for (int i = 0; i < nd; ++i) r[i] += ab[i];
    } else {
      T a[nx], b[nud > 0 ? nud : 1];
      dense::combine_rows<nx, nx>(v, d.A[k], a);
      for (int i = 0; i < nx; ++i) r[i] += a[i];
      if constexpr (nud > 0) {
        dense::combine_rows<nx, nu, nud>(v, d.B[k], b);
        for (int i = 0; i < nud; ++i) r[nx + i] += b[i];
      }
    }
  }

  /// [A_k B_k] (the inputs that enter the dynamics) into AB.
  static void stack_dynamics(const Data& d, int k, T (&AB)[nx][nd]) {
    for (int l = 0; l < nx; ++l) {
      for (int j = 0; j < nx; ++j) AB[l][j] = d.A[k][l][j];
      for (int j = 0; j < nud; ++j) AB[l][nx + j] = d.B[k][l][j];
    }
  }

  /// b + A_k x + B_k u (the inputs that enter the dynamics), into v.
  static void dynamics(const Data& d, const Workspace& ws, int k, const T* x, const T* u, const T* b, T* v) {
    if constexpr (stacked_dynamics) {
      T z[nd];
      for (int i = 0; i < nx; ++i) z[i] = x[i];
      for (int i = 0; i < nud; ++i) z[nx + i] = u[i];
      dense::multiply<nx, nd>(ws.AB[k], z, v);  // a dot per row
    } else {
      dense::multiply<nx, nx>(d.A[k], x, v);
      if constexpr (nud > 0) {
        T bu[nx];
        dense::multiply<nx, nu, nud>(d.B[k], u, bu);
        for (int i = 0; i < nx; ++i) v[i] += bu[i];
      }
    }
    for (int i = 0; i < nx; ++i) v[i] += b[i];
  }

  /// Residuals of the KKT conditions at the iterate; returns mu (mean complementarity) and the residual norms in res.
  static T residuals(const Data& d, Workspace& ws, ipm::Residuals<T>& res) {
    ipm::Norms<T> n;
    T stat = 0.0;
    for (int k = 0; k < N; ++k) {
      T* r = ws.r_z[k];
      T z[nz];  // H is symmetric: H z is a combination of its rows
      for (int i = 0; i < nx; ++i) z[i] = ws.x[k][i];
      for (int i = 0; i < nu; ++i) z[nx + i] = ws.u[k][i];
      dense::combine_rows<nz, nz>(z, d.H[k], r);
      for (int i = 0; i < nz; ++i) r[i] += d.g[k][i];
      Topology::for_transitions_from(k, [&](int e) { add_dynamics_transposed(d, ws, e, ws.pi[e], r); });
      if (k > 0)
        for (int i = 0; i < nx; ++i) r[i] -= ws.pi[k - 1][i];
      T v[mg];
      stage_values(d, ws, k, ws.x[k], ws.u[k], v);
      for (int e = 0; e < ws.n_live[k]; ++e) {
        const int m = ws.live[k][e];
        const T lam = ipm::row_residuals(ws.rows[k][m], v[e], d.lo[k][m], d.hi[k][m], price(d, k, m), n);
        add_to(ws.pattern[k], d.G[k], nb, m, lam, r);
      }
      for (int i = k == 0 ? nx : 0; i < nz; ++i) stat = anvil::running_max(stat, std::fabs(r[i]));  // x_0 is fixed
      const int from = Topology::parent(k + 1);  // transition k's stage (k in a chain; its stage is done before it)
      dynamics(d, ws, k, ws.x[from], ws.u[from], d.c[k], ws.r_dyn[k]);
      for (int i = 0; i < nx; ++i) {
        ws.r_dyn[k][i] -= ws.x[k + 1][i];
        n.equality = anvil::running_max(n.equality, std::fabs(ws.r_dyn[k][i]));
      }
    }
    T zN[nzN];
    for (int i = 0; i < nx; ++i) zN[i] = ws.x[N][i];
    for (int i = 0; i < nuN; ++i) zN[nx + i] = ws.uN[i];
    dense::combine_rows<nzN, nzN>(zN, d.HN, ws.r_N);
    for (int i = 0; i < nzN; ++i) ws.r_N[i] += d.gN[i] - (i < nx ? ws.pi[N - 1][i] : T(0));
    T vN[mgN];
    final_values(d, ws, ws.x[N], ws.uN, vN);
    for (int e = 0; e < ws.n_liveN; ++e) {
      const int m = ws.liveN[e];
      const T lam = ipm::row_residuals(ws.rowsN[m], vN[e], d.loN[m], d.hiN[m], final_price(d, m), n);
      add_to(ws.patternN, d.GN, nbN, m, lam, ws.r_N);
    }
    for (int i = 0; i < nzN; ++i) stat = anvil::running_max(stat, std::fabs(ws.r_N[i]));
    res.stationarity = stat;
    res.equality = n.equality;
    res.inequality = n.inequality;
    res.complementarity = n.complementarity;
    return n.count ? n.sum / T(n.count) : T(0);
  }

  /// The lower triangle of the symmetric H plus regularization I, into Q.
  template <int s>
  static void lower_triangle(const T (&H)[s][s], T (&Q)[s][s], T regularization) {
    for (int i = 0; i < s; ++i) {
      for (int j = 0; j < i; ++j) Q[i][j] = H[i][j];
      Q[i][i] = H[i][i] + regularization;
    }
  }

  /// Riccati factorization of the Newton system's LQ problem with Hessians H + G'WG: P, the feedbacks' factors F and
  /// the Cholesky factors (the weights W of the rows with a bound, the interior point's).
  static bool factor(const Data& d, Workspace& ws) {
    const auto terminal = [&](auto&& add) {
      for (int e = 0; e < ws.n_liveN; ++e) {
        const int m = ws.liveN[e];
        add(m, ipm::row_weight(ws.rowsN[m], final_price(d, m)));
      }
    };
    const auto stage = [&](int k, auto&& add) {
      for (int e = 0; e < ws.n_live[k]; ++e) {
        const int m = ws.live[k][e];
        add(m, ipm::row_weight(ws.rows[k][m], price(d, k, m)));
      }
    };
    return factor_weighted(d, ws, T(0), terminal, stage);
  }

  /// The factorization with Hessians H + regularization I + G'WG, the rows' weights given by terminal(add) and
  /// stage(k, add), which call add(row, weight) for each weighted row (of stage N, and of stage k < N).
  template <class Terminal, class Stage>
  static bool factor_weighted(const Data& d, Workspace& ws, T regularization, Terminal&& terminal, Stage&& stage) {
    T QN[nzN][nzN];
    lower_triangle(d.HN, QN, regularization);
    add_weighted_rows<mGN>(ws.patternN, d.GN, nbN, QN, terminal);
    if constexpr (nuN > 0) {
      if (!riccati::eliminate_inputs<nx, nuN>(QN, ws.LN, ws.FN, ws.P[N])) return false;
    } else {
      for (int i = 0; i < nx; ++i)
        for (int j = 0; j <= i; ++j) ws.P[N][i][j] = ws.P[N][j][i] = QN[i][j];
    }
    for (int k = N - 1; k >= 0; --k) {
      T Q[nz][nz];  // H + G'WG + the sum of [A B]'P[A B] over the transitions out (one in a chain), lower triangle
      bool leaf = true;  // the first transition's product adds H, the others Q
      Topology::for_transitions_from(k, [&](int e) {
        const T(&P)[nx][nx] = ws.P[e + 1];
        T stacked[stacked_dynamics ? 1 : nx][stacked_dynamics ? 1 : nd];
        const T(&AB)[nx][nd] = [&]() -> const T(&)[nx][nd] {
          if constexpr (stacked_dynamics) {
            return ws.AB[e];
          } else {
            stack_dynamics(d, e, stacked);
            return stacked;
          }
        }();
        T PAB[nx][nd];  // P [A B]
        dense::multiply_blocked<nx, nx, nd>(P, AB, PAB);
        if (leaf) {  // Q = H + the product (its rows past nd, the inputs outside the dynamics: H's)
          dense::add_lower_product<0>(AB, PAB, d.H[k], Q);
          for (int i = nd; i < nz; ++i)
            for (int j = 0; j <= i; ++j) Q[i][j] = d.H[k][i][j];
        } else {
          dense::add_lower_product<0>(AB, PAB, Q);
        }
        leaf = false;
      });
      if (leaf) {
        lower_triangle(d.H[k], Q, regularization);
      } else if (regularization != T(0)) {
        for (int i = 0; i < nz; ++i) Q[i][i] += regularization;
      }
      add_weighted_rows<mG>(ws.pattern[k], d.G[k], nb, Q, [&](auto&& add) { stage(k, add); });
      if (!riccati::eliminate_inputs<nx, nu>(Q, ws.L[k], ws.F[k], ws.P[k])) return false;
    }
    return true;
  }

  /// One Newton step for the complementarity target (`corrector` adds the predictor's dl dt): the Riccati vector
  /// pass on the reduced gradients (each stage's formed where the pass reaches it) and the rollout, then the slack and
  /// multiplier steps.
  static void newton_step(const Data& d, Workspace& ws, T target, bool corrector) {
    // backward: the terminal inputs, then p_k = q_x + A's + K'(q_u + B's), k_k = -Q_uu^-1 (q_u + B's), s = P b + p
    T qN[nzN];
    for (int i = 0; i < nzN; ++i) qN[i] = ws.r_N[i];
    for (int e = 0; e < ws.n_liveN; ++e) {
      const int m = ws.liveN[e];
      add_to(ws.patternN, d.GN, nbN, m, ipm::row_rhs(ws.rowsN[m], final_price(d, m), target, corrector), qN);
    }
    if constexpr (nuN > 0) {
      T qv[nuN];
      for (int i = 0; i < nuN; ++i) qv[i] = qN[nx + i];
      riccati::feedforward<nx, nuN>(qN, qv, ws.LN, ws.FN, ws.p[N], ws.kN);
    } else {
      for (int i = 0; i < nx; ++i) ws.p[N][i] = qN[i];
    }
    for (int k = N - 1; k >= 0; --k) {
      T qz[nz];  // the reduced gradient: the residual plus the rows' terms
      for (int i = 0; i < nz; ++i) qz[i] = ws.r_z[k][i];
      for (int e = 0; e < ws.n_live[k]; ++e) {
        const int m = ws.live[k][e];
        add_to(ws.pattern[k], d.G[k], nb, m, ipm::row_rhs(ws.rows[k][m], price(d, k, m), target, corrector), qz);
      }
      Topology::for_transitions_from(k, [&](int e) {
        // P_{e+1} b_e + p_{e+1}, with b_e = r_dyn_e (P symmetric: a combination of its rows); P b is the predictor's
        // (the corrector's factorization and residuals are the predictor's)
        if (!corrector) dense::combine_rows<nx, nx>(ws.r_dyn[e], ws.P[e + 1], ws.Pb[e]);
        T s[nx];
        for (int i = 0; i < nx; ++i) s[i] = ws.Pb[e][i] + ws.p[e + 1][i];
        add_dynamics_transposed(d, ws, e, s, qz);
      });
      riccati::feedforward<nx, nu>(qz, qz + nx, ws.L[k], ws.F[k], ws.p[k], ws.k[k]);
    }
    // forward rollout from dx_0 = 0
    for (int i = 0; i < nx; ++i) ws.dx[0][i] = 0.0;
    for (int k = 0; k < N; ++k) {
      dense::multiply<nu, nx>(ws.F[k], ws.dx[k], ws.du[k]);
      for (int i = 0; i < nu; ++i) ws.du[k][i] += ws.k[k][i];
      riccati::finish_feedback(ws.L[k], ws.du[k]);
      const int from = Topology::parent(k + 1);  // done: its stage is k or before
      dynamics(d, ws, k, ws.dx[from], ws.du[from], ws.r_dyn[k], ws.dx[k + 1]);
    }
    for (int i = 0; i < nuN; ++i) {
      T v = ws.kN[i];
      for (int j = 0; j < nx; ++j) v += ws.FN[i][j] * ws.dx[N][j];
      ws.duN[i] = v;
    }
    if constexpr (nuN > 0) riccati::finish_feedback(ws.LN, ws.duN);
    for (int k = 0; k < N; ++k) {
      T v[mg];
      stage_values(d, ws, k, ws.dx[k], ws.du[k], v);
      for (int e = 0; e < ws.n_live[k]; ++e) {
        const int m = ws.live[k][e];
        ipm::row_step(ws.rows[k][m], v[e], price(d, k, m), target, corrector);
      }
    }
    T vN[mgN];
    final_values(d, ws, ws.dx[N], ws.duN, vN);
    for (int e = 0; e < ws.n_liveN; ++e) {
      const int m = ws.liveN[e];
      ipm::row_step(ws.rowsN[m], vN[e], final_price(d, m), target, corrector);
    }
  }

  /// The step of length alpha along the last Newton step; the multipliers' dpi_k = P_{k+1} dx_{k+1} + p_{k+1} formed
  /// here, from that step's factorization and vector pass (a predictor's is never taken).
  static void take_step(Workspace& ws, T alpha) {
    for (int k = 0; k < N; ++k) {
      T dpi[nx];
      dense::combine_rows<nx, nx>(ws.dx[k + 1], ws.P[k + 1], dpi);
      for (int i = 0; i < nx; ++i) {
        ws.x[k + 1][i] += alpha * ws.dx[k + 1][i];
        ws.pi[k][i] += alpha * (dpi[i] + ws.p[k + 1][i]);
      }
      for (int i = 0; i < nu; ++i) ws.u[k][i] += alpha * ws.du[k][i];
    }
    for (int i = 0; i < nuN; ++i) ws.uN[i] += alpha * ws.duN[i];
    for_rows(ws, [&](ipm::Row<T>& r) { ipm::row_take(r, alpha); });
  }

  /// Cold start: x_k = x0, u = 0, pi = 0. Warm start: the previous primal-dual point (x_0 replaced by x0). Either
  /// way the rows' nonzeros are found and [A B] formed; `start_rows` then starts the rows.
  static void initialize(const Data& d, bool warm, Workspace& ws) {
    if (!warm) {
      // NOTE: zeroed in place; `ws = Workspace{}` builds the whole workspace as a temporary on the stack at clang -O0
      static_assert(std::is_trivially_copyable_v<Workspace>, "the workspace is plain data");
      std::memset(static_cast<void*>(&ws), 0, sizeof ws);
      for (int k = 0; k <= N; ++k)
        for (int i = 0; i < nx; ++i) ws.x[k][i] = d.x0[i];
    }
    for (int i = 0; i < nx; ++i) ws.x[0][i] = d.x0[i];
    find_patterns(d, ws);
    if constexpr (stacked_dynamics)
      for (int k = 0; k < N; ++k) stack_dynamics(d, k, ws.AB[k]);
  }

  /// The nonzeros of every stored row with a bound (a box row has one, its variable: nothing to find).
  static void find_patterns(const Data& d, Workspace& ws) {
    for (int k = 0; k < N; ++k)
      for (int m = nb; m < ng; ++m) ws.pattern[k][m - nb].find(d.G[k][m - nb], d.lo[k][m], d.hi[k][m]);
    for (int m = nbN; m < ngN; ++m) ws.patternN[m - nbN].find(d.GN[m - nbN], d.loN[m], d.hiN[m]);
  }

  /// Starts every row at the primal point, cold or (warm) restarted from its previous slacks and multipliers floored
  /// at `floor`, so the iterate is interior again; lists the rows with a bound (a present side, or an equality):
  /// only they take part in the iterations.
  static void start_rows(const Data& d, bool warm, T floor, Workspace& ws) {
    const auto live = [](const ipm::Row<T>& r) { return r.eq || r.lo_on || r.hi_on; };
    for (int k = 0; k < N; ++k) {
      ws.n_live[k] = 0;
      for (int m = 0; m < ng; ++m) {
        ipm::start_row(ws.rows[k][m], row_value(d, ws, k, m, ws.x[k], ws.u[k]), d.lo[k][m], d.hi[k][m],
                           price(d, k, m), warm, floor);
        if (live(ws.rows[k][m])) ws.live[k][ws.n_live[k]++] = static_cast<riccati::index_t<mg>>(m);
      }
    }
    ws.n_liveN = 0;
    for (int m = 0; m < ngN; ++m) {
      ipm::start_row(ws.rowsN[m], final_row_value(d, ws, m, ws.x[N], ws.uN), d.loN[m], d.hiN[m], final_price(d, m), warm,
                         floor);
      if (live(ws.rowsN[m])) ws.liveN[ws.n_liveN++] = static_cast<riccati::index_t<mgN>>(m);
    }
  }
};

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_RICCATI_HPP
