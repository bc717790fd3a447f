// anvil::qp::SparseIPMBackend: the QP contract (anvil/qp.hpp) met by a primal-dual interior point for general sparse
// QPs, min 1/2 d'P d + q'd s.t. l <= A d <= u, of one fixed pattern.
//
// Mehrotra's predictor-corrector (anvil/interior_point.hpp: the loop and the rows' slacks and multipliers, an
// equality row kept as one with a free multiplier). Each Newton system is the quasi-definite augmented system
//
//   [P + delta I   A_c'     ] [dd]   [-r_d           ]
//   [A_c           -W_c^-1  ] [v ] = [-W_c^-1 e      ]      (W: the rows' barrier weights, e their reduced residuals)
//
// of the rows with a bound (A_c; the others are decoupled), factored once per iteration by QDLDL in the fill-reducing
// order and with the symbolic pattern fixed at code generation (anvil/kkt.hpp), solved twice (predictor and
// corrector) with iterative refinement against delta = 0 (delta grows only where the inertia needs it). Its inertia
// tells a nonconvex QP: P + A_c'W_c A_c must be positive definite (at the solution, P on the null space of the active
// rows). A solved QP is polished (anvil/kkt.hpp: the KKT system of the active set the solution shows, solved
// exactly), as OSQP's solutions are: an interior point's stop short of the active bounds. No allocation: the
// workspace is buffers of sizes fixed at generation.
//
// Layout L: n, m, nK, nnz_P, nnz_A, max_iter, tol_min, the tables of anvil::qp::ActiveSetKKT, P_p[n + 1], P_i[nnz_P]
// (P's pattern). Workspace W: the buffers of ActiveSetKKT (polish's included: the screening uses them), x, dx, r (n),
// z, y, magnitude (m), A_scaled (nnz_A), row_scale, l_scaled, u_scaled, y_out (m: the equilibrated rows, their
// bounds and the multipliers of the rows as given), rows (ipm::Row, m), live (int, m: the rows with a bound), n_live,
// P, A (the loaded matrices, A equilibrated),
// delta (the regularization of the last factorization), iterations, warm (the iterate holds a solution a warm start
// can begin from), polished (the solution is the polish's).
#ifndef ANVIL_SPARSE_IPM_HPP
#define ANVIL_SPARSE_IPM_HPP
#include <cmath>

#include "anvil/interior_point.hpp"
#include "anvil/kkt.hpp"
#include "anvil/qp.hpp"

namespace anvil {
namespace qp {

template <class L, class W>
struct SparseIPMBackend {
  using Workspace = W;
  using KKT = ActiveSetKKT<L, W>;
  using real = double;  ///< QDLDL factors in double
  static constexpr int n = L::n, m = L::m;
  /// The primal regularization of the factored matrix (refined away): the first tried, and the most. Pivots that
  /// small, next to the barrier weights of nearly active rows (1e8 and more), lose the inertia to rounding; each
  /// factorization whose inertia comes out wrong is tried again with ten times the regularization, up to the most,
  /// before the QP counts as nonconvex.
  static constexpr double delta_min = 1e-9, delta_max = 1e-5;
  static constexpr bool mehrotra_start = true;  ///< cold starts begin at Mehrotra's starting point
  static constexpr ipm::Price<double> hard{};   ///< every row is hard (no elastic rows here)

  static void reset(W& ws) {
    ws.warm = false;
    ws.iterations = 0;
    KKT::forget(ws);
  }

  /// No stage structure to shift: the next solve starts cold.
  static void shift(W& ws) { reset(ws); }

  /// Keeps P and A with its rows equilibrated (equilibrate()); screens them when asked (the interior point tells a
  /// nonconvex QP itself when it solves it).
  static int load(const double* P, const double* A, const double* l, const double* u, bool screen, W& ws) {
    ws.P = P;
    ws.A = equilibrate(A, ws);
    if (!screen) return solved;
    scale_bounds(l, u, ws);
    return KKT::convex_on_active_set(P, ws.A, ws.l_scaled.data(), ws.u_scaled.data(), ws) ? solved : nonconvex;
  }

  /// Solves to tol within [tol_min, 1e-6] (at least the rounding level of q: ipm::attainable), cold from d = 0 or
  /// warm from the previous solution when it was solved.
  static int solve(const double* q, const double* l, const double* u, double tol, bool warm, W& ws) {
    scale_bounds(l, u, ws);
    const Problem d{ws.P, ws.A, q, ws.l_scaled.data(), ws.u_scaled.data()};
    const bool from_solution = warm && ws.warm;
    if (!from_solution)
      for (int j = 0; j < n; ++j) ws.x[j] = 0.0;
    ipm::Residuals<double> res;
    const double tol_qp = ipm::attainable(std::fmax(L::tol_min, std::fmin(1e-6, tol)), q, n);
    const int status =
        ipm::mehrotra<SparseIPMBackend>(d, tol_qp, L::max_iter, from_solution, ws, res, ws.iterations, ws.deadline);
    for (int i = 0; i < m; ++i) ws.y[i] = ws.active[i] ? ws.rows[i].hi.l - ws.rows[i].lo.l : 0.0;
    ws.warm = status == solved;
    // NOTE: an interior point stops short of the active bounds (by tol over the multiplier): an SQP step from x on a
    // bound moves off it by that much, uphill, and its filter then refuses the step back ("acceptable" where the
    // exact QP solution, d = 0, converges). The polish solves the KKT system of the active set read from the
    // solution, which makes it exact; the iterate stays as it is for the next warm start
    ws.polished = ws.warm && KKT::polish(ws.P, ws.A, q, d.l, d.u, ws.x.data(), ws.y.data(), ws) == KKT::polish_ok;
    const double* y = ws.polished ? ws.polish_y.data() : ws.y.data();
    for (int i = 0; i < m; ++i) ws.y_out[i] = ws.row_scale[i] * y[i];  // the multipliers of the rows as given
    return status;
  }

  static const double* primal(const W& ws) { return ws.polished ? ws.polish_d.data() : ws.x.data(); }
  static const double* dual(const W& ws) { return ws.y_out.data(); }
  static int iterations(const W& ws) { return ws.iterations; }

  /// f(row) for every row with a bound (the others are inert).
  template <class WS, class F>
  static void for_rows(WS& ws, F&& f) {
    for (int e = 0; e < ws.n_live; ++e) f(ws.rows[ws.live[e]]);
  }

 private:
  template <class S, class D, class WS>
  friend int ipm::mehrotra(const D& d, typename S::real tol, int max_iter, bool warm, WS& ws,
                           ipm::Residuals<typename S::real>& res, int& iterations, double deadline);
  template <class S, class D, class WS>
  friend int ipm::active_set_step(const D& d, WS& ws, typename S::real tol, int max_factorizations,
                                  ipm::Residuals<typename S::real>& res, double deadline);
  template <class S, class D, class WS>
  friend void ipm::mehrotra_start(const D& d, WS& ws, ipm::Residuals<typename S::real>& res);

  /// A with each row scaled by the power of two that brings its largest entry into [1, 2) (exact: no rounding; a row
  /// already there is left as it is), into ws.A_scaled. The equality rows' regularization is absolute
  /// (ipm::equality_regularization): rows of entries near 0.01 (a hanging chain's of 200 links) under a Hessian of
  /// 1e3 I gave the Newton systems' Schur complement eigenvalues near 1e-11, far below it, and the refined steps
  /// stalled (stationarity fixed at 2e-3: max_iterations where OSQP, which equilibrates, solves).
  static const double* equilibrate(const double* A, W& ws) {
    double* scaled = ws.A_scaled.data();
    double* scale = ws.row_scale.data();
    for (int i = 0; i < m; ++i) scale[i] = 0.0;
    for (int e = 0; e < L::nnz_A; ++e) scale[L::A_i[e]] = std::fmax(scale[L::A_i[e]], std::fabs(A[e]));
    for (int i = 0; i < m; ++i)
      scale[i] = scale[i] > 0.0 && std::isfinite(scale[i]) ? std::ldexp(1.0, -std::ilogb(scale[i])) : 1.0;
    for (int e = 0; e < L::nnz_A; ++e) scaled[e] = A[e] * scale[L::A_i[e]];
    return scaled;
  }

  /// The bounds of the equilibrated rows, into ws.l_scaled and ws.u_scaled (infinite ones stay so).
  static void scale_bounds(const double* l, const double* u, W& ws) {
    for (int i = 0; i < m; ++i) {
      ws.l_scaled[i] = l[i] * ws.row_scale[i];
      ws.u_scaled[i] = u[i] * ws.row_scale[i];
    }
  }

  /// One QP: the loaded matrices and this solve's vectors.
  struct Problem {
    const double *P, *A, *q, *l, *u;
  };

  /// Starts every row at the iterate (cold, or warm with its slacks and multipliers floored at `floor`) and marks the
  /// rows with a bound (a present side, or an equality): only they take part in the iterations.
  static void start_rows(const Problem& d, bool warm, double floor, W& ws) {
    KKT::multiply(d.A, ws.x.data(), ws.z.data());
    ws.n_live = 0;
    for (int i = 0; i < m; ++i) {
      ipm::Row<double>& r = ws.rows[i];
      ipm::start_row(r, ws.z[i], d.l[i], d.u[i], hard, warm, floor);
      ws.active[i] = r.eq || r.lo_on || r.hi_on;
      if (ws.active[i]) ws.live[ws.n_live++] = i;
    }
  }

  /// The KKT residuals at the iterate (the stationarity's, r = P d + q + A'y, kept in ws.r); returns mu.
  static double residuals(const Problem& d, W& ws, ipm::Residuals<double>& res) {
    double* r = ws.r.data();
    double* y = ws.y.data();
    const double* x = ws.x.data();
    for (int j = 0; j < n; ++j) r[j] = d.q[j];
    for (int j = 0; j < n; ++j)  // P x, P an upper triangle
      for (int e = L::P_p[j]; e < L::P_p[j + 1]; ++e) {
        const int i = L::P_i[e];
        r[i] += d.P[e] * x[j];
        if (i != j) r[j] += d.P[e] * x[i];
      }
    // z = A x, and each row's terms' magnitude sum_j |a_ij x_j| (at least 1), in one pass over A
    // NOTE: a row's residuals are measured relative to that magnitude: rounding leaves eps times it, and an elastic
    // QP whose step is large (1e6, where the objective is nearly flat) stalled at an absolute equality residual of
    // 1e-10, which the stall test then called infeasible
    double* z = ws.z.data();
    double* magnitude = ws.magnitude.data();
    for (int i = 0; i < m; ++i) {
      z[i] = 0.0;
      magnitude[i] = 1.0;
    }
    for (int j = 0; j < n; ++j)
      for (int e = L::A_p[j]; e < L::A_p[j + 1]; ++e) {
        const double term = d.A[e] * x[j];
        z[L::A_i[e]] += term;
        magnitude[L::A_i[e]] += std::fabs(term);
      }
    ipm::Norms<double> norms;
    for (int i = 0; i < m; ++i) y[i] = 0.0;
    for (int e = 0; e < ws.n_live; ++e) {
      const int i = ws.live[e];
      ipm::Norms<double> row;
      y[i] = ipm::row_residuals(ws.rows[i], ws.z[i], d.l[i], d.u[i], hard, row);
      norms.equality = std::fmax(norms.equality, row.equality / magnitude[i]);
      norms.inequality = std::fmax(norms.inequality, row.inequality / magnitude[i]);
      norms.complementarity = std::fmax(norms.complementarity, row.complementarity);
      norms.sum += row.sum;
      norms.count += row.count;
    }
    double stationarity = 0.0;
    for (int j = 0; j < n; ++j) {
      for (int e = L::A_p[j]; e < L::A_p[j + 1]; ++e) r[j] += d.A[e] * y[L::A_i[e]];
      stationarity = std::fmax(stationarity, std::fabs(r[j]));
    }
    res.stationarity = stationarity;
    res.equality = norms.equality;
    res.inequality = norms.inequality;
    res.complementarity = norms.complementarity;
    return norms.count ? norms.sum / norms.count : 0.0;
  }

  /// Factors the augmented system with the rows' barrier weights; false when its inertia says nonconvex at every
  /// regularization up to delta_max.
  static bool factor(const Problem& d, W& ws) {
    const auto row_diagonal = [&](int i) { return -1.0 / ipm::row_weight(ws.rows[i], hard); };
    for (ws.delta = delta_min; ws.delta <= delta_max; ws.delta *= 10.0)
      if (KKT::factor_weighted(d.P, d.A, ws.delta, row_diagonal, ws)) return true;
    return false;
  }

  /// One Newton step for the complementarity target (`corrector` adds the predictor's dl dt): the primal step from
  /// the factored system, then the rows' slack and multiplier steps.
  static void newton_step(const Problem& d, W& ws, double target, bool corrector) {
    double* rhs = ws.krhs.data();
    double* sol = ws.ksol.data();
    for (int j = 0; j < n; ++j) rhs[L::K_perm[j]] = -ws.r[j];
    for (int i = 0; i < m; ++i) rhs[L::K_perm[n + i]] = 0.0;
    for (int e = 0; e < ws.n_live; ++e) {
      const int i = ws.live[e];
      const ipm::Row<double>& r = ws.rows[i];
      rhs[L::K_perm[n + i]] = -ipm::row_rhs(r, hard, target, corrector) / ipm::row_weight(r, hard);
    }
    // NOTE: refined against the unregularized system: no primal regularization (unless the inertia needed more than
    // delta_min: then a proximal step, as refining against an indefinite matrix diverges) and exact equality rows,
    // whose multiplier steps are then the solution's own (a regularized equality leaves a residual of delta times
    // the multiplier step, which with multipliers of 1e3 stalls the equality residual at 1e-5)
    const auto equality = [&](int i) { return ws.rows[i].eq ? -ipm::equality_regularization<double> : 0.0; };
    KKT::solve_refined(rhs, sol, ws.delta == delta_min ? delta_min : 0.0, equality, ws, true);
    for (int j = 0; j < n; ++j) ws.dx[j] = sol[L::K_perm[j]];
    KKT::multiply(d.A, ws.dx.data(), ws.z.data());
    for (int e = 0; e < ws.n_live; ++e) {
      const int i = ws.live[e];
      ipm::Row<double>& r = ws.rows[i];
      ipm::row_step(r, ws.z[i], hard, target, corrector);
      if (r.eq) r.hi.dl = sol[L::K_perm[n + i]];
    }
  }

  /// x += alpha dx, and every row's slacks and multipliers.
  static void take_step(W& ws, double alpha) {
    for (int j = 0; j < n; ++j) ws.x[j] += alpha * ws.dx[j];
    for_rows(ws, [&](ipm::Row<double>& r) { ipm::row_take(r, alpha); });
  }
};

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_SPARSE_IPM_HPP
