// anvil::sqp::SolutionSensitivity: the derivatives of a converged NLP solution with respect to its parameter p, from
// the KKT system at the solution (the implicit function theorem), factored once with QDLDL (anvil/kkt.hpp) and solved
// for one right-hand side per entry of p.
//
// At a solution (x, lam_g, lam_x) of min f(x, p) s.t. lbg <= g(x, p) <= ubg, lbx <= x <= ubx, with the active set
// held, stationarity and the active rows stay satisfied as p moves:
//   [ H    A_a' ] [ dx/dp     ]     [ d2L/dxdp ]
//   [ A_a   0   ] [ dlam_a/dp ] = -[ dg_a/dp  ]
// with H the exact Hessian of the Lagrangian and A_a the rows of [dg/dx; I] held at a bound. A row is active when it
// is an equality or sits at a bound (within bound_tol, relative) with a multiplier of that bound's sign; at a bound
// with a zero multiplier (below multiplier_tol of the largest) it is weakly active: strict complementarity fails, the
// row is left free (the derivative of the side where it stays inactive) and counted.
//
// Layout L: n, ng, np, m (= ng + n: the rows of A = [dg/dx; I]), nK, nnz_P, nnz_A, nnz_J; the ActiveSetKKT tables
// (P = H's upper triangle, A = [dg/dx; I]); J_to_A[nnz_J], I_to_A[n] (where dg/dx's entries and the identity's go in
// A). Workspace W: ActiveSetKKT's buffers, and double arrays hess (nnz_P), jac (nnz_J), A (nnz_A), g (ng), mixed
// (n x np, row-major: d2L/dxdp), g_p (ng x np, row-major: dg/dp).
#ifndef ANVIL_SENSITIVITY_HPP
#define ANVIL_SENSITIVITY_HPP
#include <cmath>

#include "anvil/kkt.hpp"

namespace anvil {
namespace sqp {

template <class L, class W>
struct SolutionSensitivity {
  using KKT = qp::ActiveSetKKT<L, W>;
  static constexpr int n = L::n, ng = L::ng, np = L::np, m = L::m;
  static constexpr double bound_tol = 1e-6;       ///< a row this close to a bound (relative, at least 1) is at it
  static constexpr double multiplier_tol = 1e-9;  ///< a multiplier this small against the largest is zero
  /// A refined solve leaving a residual of the unregularized KKT system above this (relative to the right-hand side)
  /// means the system has no solution: the matrix is singular (the active rows' Jacobian rank deficient, or H singular
  /// on their null space) and the right-hand side outside its range. A singular system that has solutions (active
  /// rows with one gradient moving together) gives the unique dx/dp and the derivatives of the least-norm multipliers.
  static constexpr double residual_tol = 1e-8;

  /// What solve() returns besides the count of weakly active rows (>= 0): the KKT matrix singular, or with the wrong
  /// inertia (H not positive definite on the active rows' null space: no strict local minimum), or a derivative at the
  /// solution not finite.
  enum Failure : int { singular = -1, not_finite = -2 };

  /// A row's part in the active set: 0 free, 1 at its lower bound, 2 at its upper bound, 3 an equality, -1 weakly
  /// active (at a bound with a zero multiplier).
  static int classify(double value, double lo, double hi, double lam, double scale) {
    if (lo == hi) return 3;
    const double reach =
        bound_tol * std::fmax(1.0, std::fmax(std::isfinite(lo) ? std::fabs(lo) : 0.0, std::isfinite(hi) ? std::fabs(hi) : 0.0));
    const bool at_lower = value - lo <= reach, at_upper = hi - value <= reach;
    if (std::fabs(lam) <= multiplier_tol * scale) return at_lower || at_upper ? -1 : 0;
    return at_lower && lam < 0 ? 1 : at_upper && lam > 0 ? 2 : 0;
  }

  /// With ws.hess, ws.jac, ws.g, ws.mixed and ws.g_p evaluated at the solution: dx_dp (n x np), dlam_g_dp (ng x np),
  /// dlam_x_dp (n x np), all row-major, and each row's part in the active set (`active`: g's rows, then x's; see
  /// classify). Returns the count of weakly active rows, or a Failure (outputs then unspecified).
  static int solve(const double* x, const double* lam_g, const double* lam_x, const double* lbx, const double* ubx,
                   const double* lbg, const double* ubg, double* dx_dp, double* dlam_g_dp, double* dlam_x_dp,
                   int* active, W& ws) {
    if (!all_finite(ws.hess.data(), L::nnz_P) || !all_finite(ws.jac.data(), L::nnz_J) ||
        !all_finite(ws.g.data(), ng) || !all_finite(ws.mixed.data(), n * np) || !all_finite(ws.g_p.data(), ng * np))
      return not_finite;
    double scale = 1.0;
    for (int i = 0; i < ng; ++i) scale = std::fmax(scale, std::fabs(lam_g[i]));
    for (int i = 0; i < n; ++i) scale = std::fmax(scale, std::fabs(lam_x[i]));
    int weak = 0;
    for (int r = 0; r < m; ++r) {
      const bool is_g = r < ng;
      const int i = is_g ? r : r - ng;
      active[r] = is_g ? classify(ws.g[i], lbg[i], ubg[i], lam_g[i], scale)
                       : classify(x[i], lbx[i], ubx[i], lam_x[i], scale);
      ws.active[r] = active[r] > 0 ? active[r] : 0;
      weak += active[r] < 0;
    }
    double* A = ws.A.data();
    for (int e = 0; e < L::nnz_J; ++e) A[L::J_to_A[e]] = ws.jac[e];
    for (int i = 0; i < n; ++i) A[L::I_to_A[i]] = 1.0;
    if (!KKT::factor(ws.hess.data(), A, ws)) return singular;
    double* rhs = ws.krhs.data();
    double* sol = ws.ksol.data();
    const auto row_regularization = [](int) { return -KKT::delta; };
    for (int j = 0; j < np; ++j) {
      for (int i = 0; i < n; ++i) rhs[L::K_perm[i]] = -ws.mixed[i * np + j];
      for (int r = 0; r < m; ++r) rhs[L::K_perm[n + r]] = r < ng && ws.active[r] ? -ws.g_p[r * np + j] : 0.0;
      KKT::solve_refined(rhs, sol, KKT::delta, row_regularization, ws);
      double size = 1.0;
      for (int i = 0; i < L::nK; ++i) size = std::fmax(size, std::fabs(rhs[i]));
      if (!(KKT::residual(rhs, sol, KKT::delta, row_regularization, ws) <= residual_tol * size)) return singular;
      for (int i = 0; i < n; ++i) dx_dp[i * np + j] = sol[L::K_perm[i]];
      for (int r = 0; r < m; ++r) {
        const double value = ws.active[r] ? sol[L::K_perm[n + r]] : 0.0;
        (r < ng ? dlam_g_dp[r * np + j] : dlam_x_dp[(r - ng) * np + j]) = value;
      }
    }
    return all_finite(dx_dp, n * np) && all_finite(dlam_g_dp, ng * np) && all_finite(dlam_x_dp, n * np) ? weak
                                                                                                          : singular;
  }

 private:
  static bool all_finite(const double* v, int size) {
    for (int i = 0; i < size; ++i)
      if (!std::isfinite(v[i])) return false;
    return true;
  }
};

}  // namespace sqp
}  // namespace anvil
#endif  // ANVIL_SENSITIVITY_HPP
