// anvil::qp::ActiveSetKKT: the equality-constrained KKT system of a QP's active set, factored with QDLDL.
//
// For min 1/2 d'Pd + q'd s.t. l <= Ad <= u (fixed patterns of P, upper triangle with its full diagonal, and A) and
// a guess of the active rows, the matrix [P + delta I, A_act'; A_act, -delta I] is assembled in a fixed banded order
// (inactive rows decoupled: their A entries zeroed, -1 on their diagonal), so its pattern, ordering and symbolic
// factorization never change and each use only refactors numerically. It serves two purposes:
//   - an inertia test: P is positive definite on the null space of the active rows exactly when the LDL' factor has
//     n positive pivots (used to regularize before solving, and by backends whose own iteration cannot tell);
//   - polishing: ADMM (OSQP) reaches the active set long before high accuracy; one solve of this system with the
//     active set read from the ADMM iterate makes the solution exact, as OSQP's own polish does in its full build
//     (embedded builds lack it).
//
// The factorization and the refined solve serve other KKT systems of the same pattern too (factor_weighted,
// solve_refined): the sparse interior point's (anvil/sparse_ipm.hpp), whose row diagonals are its barrier weights.
//
// Layout L (sizes and tables, generated for the patterns): n, m, nK (= n + m), nnz_P, nnz_A; P_to_K[nnz_P],
// Pdiag_to_K[n], A_to_K[nnz_A], ydiag_to_K[m] (where the values go in K), K_perm[nK] (position of unknown i: d
// first, then y), K_p[nK + 1], K_i (K's upper-triangular pattern), K_etree[nK], K_Lnz[nK] (its symbolic
// factorization), A_p[n + 1], A_i[nnz_A] (A's pattern). Workspace W: anvil::Arrays Kx, Lx, D, Dinv, fwork, ksol,
// krhs, kres (double); Li, Lp, iwork, bwork (int); active, previous_active (int, m); polish_d (double, n), polish_y
// (double, m).
#ifndef ANVIL_KKT_HPP
#define ANVIL_KKT_HPP
#include <cmath>

#include "qdldl.h"

namespace anvil {
namespace qp {

template <class L, class W>
struct ActiveSetKKT {
  static_assert(sizeof(QDLDL_int) == sizeof(int) && sizeof(QDLDL_bool) == sizeof(int), "QDLDL built with 32-bit ints");
  static constexpr int n = L::n, m = L::m, nK = L::nK;
  static constexpr double delta = 1e-9;  ///< the primal and dual regularization of the factored matrix

  /// How a polish ended: a consistent active set and its exact solution, none found, or an active set on whose null
  /// space P is not positive definite.
  enum Polish : int { polish_nonconvex = -1, polish_failed = 0, polish_ok = 1 };

  /// Factor the KKT matrix of the rows marked in ws.active (3: equality, 1: lower, 2: upper, 0: inactive); true
  /// when its inertia is right (P positive definite on the null space of the active rows).
  static bool factor(const double* P, const double* A, W& ws) {
    return factor_weighted(P, A, delta, [](int) { return -delta; }, ws);
  }

  /// Factor [P + regularization I, A_c'; A_c, diag(row_diagonal(i))] with A_c the rows marked nonzero in ws.active
  /// (row_diagonal(i) < 0 for those; the other rows decoupled: their A entries zeroed, -1 on their diagonal); true
  /// when the inertia is right (n positive pivots: P + regularization I + A_c' diag(-1/row_diagonal) A_c is positive
  /// definite).
  template <class F>
  static bool factor_weighted(const double* P, const double* A, double regularization, F&& row_diagonal, W& ws) {
    double* Kx = ws.Kx.data();
    const int* active = ws.active.data();
    for (int j = 0; j < n; ++j) Kx[L::Pdiag_to_K[j]] = 0.0;  // a diagonal entry P's pattern may lack
    for (int e = 0; e < L::nnz_P; ++e) Kx[L::P_to_K[e]] = P[e];
    for (int j = 0; j < n; ++j) Kx[L::Pdiag_to_K[j]] += regularization;
    for (int e = 0; e < L::nnz_A; ++e) Kx[L::A_to_K[e]] = active[L::A_i[e]] ? A[e] : 0.0;
    for (int i = 0; i < m; ++i) Kx[L::ydiag_to_K[i]] = active[i] ? row_diagonal(i) : -1.0;
    // NOTE: the symbolic factorization (elimination tree, column counts) was computed at generation: numeric only
    return QDLDL_factor(nK, L::K_p, L::K_i, Kx, ws.Lp.data(), ws.Li.data(), ws.Lx.data(), ws.D.data(), ws.Dinv.data(),
                        L::K_Lnz, L::K_etree, ws.bwork.data(), ws.iwork.data(), ws.fwork.data()) == n;
  }

  /// Solve K s = rhs (both in K's order, K_perm) with the last factorization, with three steps of iterative
  /// refinement against K less its regularization: `regularization` on the diagonal of P's block and
  /// row_regularization(i) on that of the active row i; with stop_at_rounding, no more once the residual is at
  /// rounding level (a Newton step's accuracy; a polished solution takes all three: its active bounds then hold to
  /// the last bit, which the hard bounds of an MPC's inputs need).
  template <class F>
  static void solve_refined(const double* rhs, double* sol, double regularization, F&& row_regularization, W& ws,
                            bool stop_at_rounding = false) {
    double scale = 0.0;
    for (int i = 0; i < nK; ++i) {
      sol[i] = rhs[i];
      scale = std::fmax(scale, std::fabs(rhs[i]));
    }
    QDLDL_solve(nK, ws.Lp.data(), ws.Li.data(), ws.Lx.data(), ws.Dinv.data(), sol);
    for (int refine = 0; refine < 3; ++refine) {
      const double r = residual(rhs, sol, regularization, row_regularization, ws);
      if (stop_at_rounding && !(r > 1e-15 * scale)) break;
      QDLDL_solve(nK, ws.Lp.data(), ws.Li.data(), ws.Lx.data(), ws.Dinv.data(), ws.kres.data());
      for (int i = 0; i < nK; ++i) sol[i] += ws.kres[i];
    }
  }

  /// ws.kres = rhs - K sol with K the last factored matrix less its regularization (see solve_refined); returns its
  /// largest magnitude.
  template <class F>
  static double residual(const double* rhs, const double* sol, double regularization, F&& row_regularization, W& ws) {
    const double* Kx = ws.Kx.data();
    const int* active = ws.active.data();
    double* r = ws.kres.data();
    for (int i = 0; i < nK; ++i) r[i] = rhs[i];
    for (int j = 0; j < nK; ++j)
      for (int e = L::K_p[j]; e < L::K_p[j + 1]; ++e) {
        const int i = L::K_i[e];
        r[i] -= Kx[e] * sol[j];
        if (i != j) r[j] -= Kx[e] * sol[i];
      }
    for (int j = 0; j < n; ++j) r[L::K_perm[j]] += regularization * sol[L::K_perm[j]];
    for (int i = 0; i < m; ++i)
      if (active[i]) r[L::K_perm[n + i]] += row_regularization(i) * sol[L::K_perm[n + i]];
    double largest = 0.0;
    for (int i = 0; i < nK; ++i) largest = std::fmax(largest, std::fabs(r[i]));
    return largest;
  }

  /// Inertia test before a QP is solved: is P positive definite on the null space of the equality rows and of the
  /// rows active in the previous solution?
  static bool convex_on_active_set(const double* P, const double* A, const double* l, const double* u, W& ws) {
    for (int i = 0; i < m; ++i) ws.active[i] = is_equality(l[i], u[i]) ? 3 : ws.previous_active[i];
    return factor(P, A, ws);
  }

  /// Forget the active set of the previous solution.
  static void forget(W& ws) {
    for (int i = 0; i < m; ++i) ws.previous_active[i] = 0;
  }

  /// Polish the QP solution (x, y): guess the active set from the iterate and solve its KKT system (refined against
  /// delta = 0). A few primal-dual active-set corrections follow (drop rows whose multiplier has the wrong sign, add
  /// violated rows) until the result is primal feasible with multipliers of the right signs. Writes ws.polish_d and
  /// ws.polish_y, and on success keeps the active set for the next inertia test.
  static Polish polish(const double* P, const double* A, const double* q, const double* l, const double* u,
                       const double* x, const double* y, W& ws) {
    double* z = ws.kres.data();
    int* active = ws.active.data();
    multiply(A, x, z);
    for (int i = 0; i < m; ++i)
      active[i] = is_equality(l[i], u[i]) ? 3 : z[i] - l[i] < -y[i] ? 1 : u[i] - z[i] < y[i] ? 2 : 0;
    for (int pass = 0; pass < 5; ++pass) {
      if (!solve(P, A, q, l, u, ws)) return polish_nonconvex;
      const double* lam = ws.polish_y.data();
      double ymax = 1.0;
      for (int i = 0; i < m; ++i) ymax = std::fmax(ymax, std::fabs(lam[i]));
      multiply(A, ws.polish_d.data(), z);
      int changes = 0;
      for (int i = 0; i < m; ++i) {
        const double slack = 1e-8 * (1.0 + std::fabs(z[i]));
        if (!std::isfinite(z[i]) || (active[i] == 3 && std::fabs(z[i] - l[i]) > slack)) return polish_failed;
        const int before = active[i];
        if ((active[i] == 1 && lam[i] > 1e-9 * ymax) || (active[i] == 2 && lam[i] < -1e-9 * ymax))
          active[i] = 0;
        else if (!active[i] && z[i] < l[i] - slack)
          active[i] = 1;
        else if (!active[i] && z[i] > u[i] + slack)
          active[i] = 2;
        changes += active[i] != before;
      }
      if (!changes) {
        for (int i = 0; i < m; ++i) ws.previous_active[i] = active[i] == 3 ? 0 : active[i];
        return polish_ok;
      }
    }
    return polish_failed;
  }

  /// z = A d
  static void multiply(const double* A, const double* d, double* z) {
    for (int i = 0; i < m; ++i) z[i] = 0.0;
    for (int j = 0; j < n; ++j)
      for (int e = L::A_p[j]; e < L::A_p[j + 1]; ++e) z[L::A_i[e]] += A[e] * d[j];
  }

 private:
  /// Equal bounds (to rounding); an infinite bound makes no equality.
  static bool is_equality(double lo, double hi) {
    return std::isfinite(lo) && hi - lo <= 1e-12 * std::fmax(1.0, std::fabs(lo));
  }


  /// Solve the KKT system of the equality-constrained QP given by ws.active into ws.polish_d/polish_y, with three
  /// steps of iterative refinement against the unregularized matrix. False when the reduced Hessian is not positive
  /// definite on the active rows.
  static bool solve(const double* P, const double* A, const double* q, const double* l, const double* u, W& ws) {
    if (!factor(P, A, ws)) return false;
    double* sol = ws.ksol.data();
    double* rhs = ws.krhs.data();
    const int* active = ws.active.data();
    for (int j = 0; j < n; ++j) rhs[L::K_perm[j]] = -q[j];
    for (int i = 0; i < m; ++i) rhs[L::K_perm[n + i]] = active[i] == 2 ? u[i] : active[i] ? l[i] : 0.0;
    solve_refined(rhs, sol, delta, [](int) { return -delta; }, ws);
    for (int j = 0; j < n; ++j) ws.polish_d[j] = sol[L::K_perm[j]];
    for (int i = 0; i < m; ++i) ws.polish_y[i] = active[i] ? sol[L::K_perm[n + i]] : 0.0;
    return true;
  }
};

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_KKT_HPP
