// anvil::integrators::ImplicitRK: an implicit Runge-Kutta step x_next = F(x, u, p) of an ODE, or of a semi-explicit
// index-1 DAE (xdot = f(x, z, u, p), 0 = g(x, z, u, p), algebraic states z), solved by Newton's method at run time,
// with its exact first and second derivatives by the implicit function theorem (as acados's IRK integrator does):
//
//   stages:   y = [K_1; Z_1; ...; K_s; Z_s], the stage derivatives and algebraic states, solve R(y; x, u) = 0 with
//             R_i = [K_i - f(v_i); -g(v_i)] at the stage points v_i = [x + h sum_j a_ij K_j; Z_i; u] (the ODE's
//             function e = [f; g] of v = [x; z; u]); Newton's matrix M = dR/dy from e's Jacobian at the stage points,
//             factorized (LU, partial pivoting) at every iteration, and at the converged point for the derivatives;
//   forward:  S = dx_next/d[x; u] from dy/d[x; u] = M^-1 (J_x S + J_u [0 I]) (one factorization, nz right-hand sides);
//   hessian:  the Hessian of lam'F in [x; u]: the adjoint mu of the stages solves M' mu = [h b_i lam; 0], and every
//             stage point adds DV_i' (d^2 mu_i'e) DV_i with DV_i = dv_i/d[x; u] (R is linear in y but for e), then
//             lam += J_x' mu carries the adjoint to the step before.
//
// Newton starts each step from K = 0 and the algebraic states of the step before (O::z_guess for the first), keeps
// its matrix while the iterates contract fast (one factorization for most steps, as RADAU5 does), damps its steps
// until the residual decreases (far from the solution of a stiff step, a full one overshoots into regions where the
// ODE overflows), and stops when an update moves the states by at most newton_tol (1 + |x|) (h |dK|; |dZ| for the
// algebraic states) within newton_iter iterations; else, or when M is singular or e returns NaN/inf at the start,
// the step fails: its outputs are NaN and the status says why (ImplicitStatus below). The derivatives use M
// refactorized at the converged stages: exact there, whatever matrix the iterations used.
//
// The method's tables are the ODE struct's as for ExplicitRK (a full, not strictly lower), with na (algebraic
// states), newton_tol, newton_iter and z_guess[na]; e's Jacobian is CSC (ne x nv, ne = nx + na, nv = ne + nu), the
// Hessian of mu'e its upper triangle (nv x nv). E: rate(v, p, e), jacobian(v, p, values), hessian(v, mu, p, values).
#ifndef ANVIL_IMPLICIT_RK_HPP
#define ANVIL_IMPLICIT_RK_HPP
#include <algorithm>
#include <cmath>
#include <utility>

#include "anvil/dense.hpp"

namespace anvil {
namespace integrators {

/// Why an implicit step failed (0: it did not).
enum ImplicitStatus : int {
  kStepSolved = 0,
  kNewtonNotConverged = 1,  ///< newton_iter Newton iterations did not reach newton_tol
  kNewtonSingular = 2,      ///< Newton's matrix is singular (or not finite)
  kOdeNotFinite = 3,        ///< the ODE (or its Jacobian) returned NaN/inf, or the iterates left the finite numbers
};

template <class O, bool second_order>
struct ImplicitRK {
  using real = typename O::real;  ///< the scalar type of the step (double, or float)
  static constexpr int nx = O::nx, nu = O::nu, na = O::na, ne = nx + na, nv = ne + nu, nz = nx + nu;
  static constexpr int s = O::stages, steps = O::steps, m = s * ne;  ///< m: the unknowns of one step
  static constexpr int kept = second_order ? steps : 1;  ///< steps whose stage points and factorization are kept
  /// Where component r (a state, then an algebraic state) of stage i sits among the unknowns y: state-major, so a
  /// model whose Jacobian is banded gives a banded Newton matrix, whose factorization keeps to the band.
  static constexpr int unknown(int i, int r) { return r * s + i; }
  static constexpr int jac_nnz = O::jac_nnz > 0 ? O::jac_nnz : 1;
  static constexpr int hess_nnz = O::hess_nnz > 0 ? O::hess_nnz : 1;

  /// The stage points, Jacobians, factorizations and sensitivities (of every step with second_order, else of the
  /// last one), and the scratch of Newton's method. Plain arrays: no allocation.
  struct Workspace {
    real v[kept][s][nv];       ///< the stage points [X_i; Z_i; u]
    real J[kept][s][jac_nnz];  ///< de/dv there (CSC values)
    real LU[kept][m][m];       ///< Newton's matrix at the converged stages, factorized in place
    int piv[kept][m];          ///< its row interchanges
    int last[kept][m];         ///< the last column of each row of U with a nonzero
    int first[kept][m];        ///< the first column of each row of L with a nonzero (the row's own: none)
    int bottom[m];             ///< the factorization's scratch: the last row of each column with a nonzero
    real DV[kept][s][nv][nz];  ///< dv_i/d[x; u] (second_order only)
    real y[m], r[m], y0[m], dy[m], e[ne], dY[m][nz], x[nx], S[nx][nz], z[na > 0 ? na : 1];
    real mu[m], mu_i[ne], lam[nx], hf[hess_nnz], T[nv][nz];
    int status;  ///< of the last step(): an ImplicitStatus
  };

  /// x_next = F(x, u, p) alone; false (x_next NaN, w.status why) when the step failed.
  template <class E>
  static bool step(const real* x0, const real* u, const real* p, real* x_next, Workspace& w, E& eval) {
    start(x0, w);
    for (int n = 0; n < steps; ++n) {
      if ((w.status = solve_stages(u, p, 0, false, w, eval)) != kStepSolved) return failed(x_next, nullptr);
      advance(w);
    }
    for (int r = 0; r < nx; ++r) x_next[r] = w.x[r];
    return true;
  }

  /// x_next = F(x, u, p) and jac = dx_next/d[x; u] (row-major, nx x nz); keeps what hessian() needs. false (both NaN,
  /// w.status why) when the step failed.
  template <class E>
  static bool forward(const real* x0, const real* u, const real* p, real* x_next, real* jac, Workspace& w,
                      E& eval) {
    start(x0, w);
    for (int r = 0; r < nx; ++r)
      for (int c = 0; c < nz; ++c) w.S[r][c] = c == r ? real(1) : real(0);
    for (int n = 0; n < steps; ++n) {
      const int at = second_order ? n : 0;
      if ((w.status = solve_stages(u, p, at, true, w, eval)) != kStepSolved) return failed(x_next, jac);
      stage_sensitivities(at, w);
      if constexpr (second_order) stage_point_sensitivities(at, w);
      // S += h sum_i b_i dK_i
      for (int i = 0; i < s; ++i)
        for (int r = 0; r < nx; ++r)
          for (int c = 0; c < nz; ++c) w.S[r][c] += O::h * O::b[i] * w.dY[unknown(i, r)][c];
      advance(w);
    }
    for (int r = 0; r < nx; ++r) {
      x_next[r] = w.x[r];
      for (int c = 0; c < nz; ++c) jac[r * nz + c] = w.S[r][c];
    }
    return true;
  }

  /// H (row-major nz x nz, upper triangle) += the Hessian of lam'F in [x; u] at the point of the last forward()
  /// (which succeeded).
  template <class E>
  static void hessian(const real* lam, const real* p, real* H, Workspace& w, E& eval) {
    static_assert(second_order, "hessian() needs every step's stage points: ImplicitRK<O, true>");
    for (int r = 0; r < nx; ++r) w.lam[r] = lam[r];
    for (int n = steps - 1; n >= 0; --n) {
      for (int i = 0; i < s; ++i)
        for (int r = 0; r < ne; ++r) w.mu[unknown(i, r)] = r < nx ? O::h * O::b[i] * w.lam[r] : real(0);
      anvil::dense::lu_solve_transposed(w.LU[n], w.piv[n], w.mu);
      for (int i = 0; i < s; ++i) {
        for (int r = 0; r < ne; ++r) w.mu_i[r] = w.mu[unknown(i, r)];
        eval.hessian(w.v[n][i], w.mu_i, p, w.hf);
        add_second_order(w.hf, w.DV[n][i], w.T, H);
        // lam += J_x' mu_i: the adjoint of the step's start
        for (int c = 0; c < nx; ++c)
          for (int e = O::jac_p[c]; e < O::jac_p[c + 1]; ++e) w.lam[c] += w.J[n][i][e] * w.mu[unknown(i, O::jac_i[e])];
      }
    }
  }

 private:
  static void start(const real* x0, Workspace& w) {
    for (int r = 0; r < nx; ++r) w.x[r] = x0[r];
    for (int q = 0; q < na; ++q) w.z[q] = O::z_guess[q];
  }

  static bool failed(real* x_next, real* jac) {
    for (int r = 0; r < nx; ++r) x_next[r] = static_cast<real>(NAN);
    if (jac != nullptr)
      for (int e = 0; e < nx * nz; ++e) jac[e] = static_cast<real>(NAN);
    return false;
  }

  /// Newton's method on the stages of the step from w.x: y converged (and with `factorized`, e's Jacobian and
  /// Newton's matrix factorized at it, in slot `at`). Newton's matrix is kept while the iterates contract fast
  /// (an update at most `contraction` of the one before, at a rate that reaches the tolerance within newton_iter:
  /// one factorization for most steps) and refreshed at the iterate otherwise; each step is damped (halved up to
  /// max_halvings times, after a refresh if the matrix was kept) until the scaled residual's squared norm decreases
  /// (Armijo); a step that moves the states by at most newton_tol (1 + |x|) ends the iterations.
  template <class E>
  static int solve_stages(const real* u, const real* p, int at, bool factorized, Workspace& w, E& eval) {
    for (int i = 0; i < s; ++i)
      for (int r = 0; r < ne; ++r) w.y[unknown(i, r)] = r < nx ? real(0) : w.z[r - nx];
    real scale = 0;
    for (int r = 0; r < nx; ++r) scale = std::fmax(scale, std::fabs(w.x[r]));
    if (!residual(u, p, at, w, eval)) return kOdeNotFinite;
    if (const int status = newton_matrix(p, at, w, eval)) return status;
    real merit = residual_merit(w), last = static_cast<real>(HUGE_VAL);
    bool fresh = true;  // Newton's matrix is the one at y
    for (int iteration = 0; iteration < O::newton_iter; ++iteration) {
      for (int k = 0; k < m; ++k) w.y0[k] = w.y[k], w.dy[k] = w.r[k];
      anvil::dense::lu_solve<1>(w.LU[at], w.piv[at], w.first[at], w.last[at], w.dy);
      real moved = 0, size = scale;
      for (int k = 0; k < m; ++k) {
        moved = std::fmax(moved, scale_of(k) * std::fabs(w.dy[k]));
        if (k / s >= nx) size = std::fmax(size, std::fabs(w.y[k]));
      }
      // NOTE: a step within the tolerance is taken whole: at convergence the residual is rounding, which no step
      // decreases reliably
      const bool small = moved <= O::newton_tol * (1 + size);
      const int halvings = damped_step(u, p, at, small, merit, w, eval);
      if (halvings > max_halvings) {
        if (fresh) return kNewtonNotConverged;
        for (int k = 0; k < m; ++k) w.y[k] = w.y0[k];
        if (!residual(u, p, at, w, eval)) return kOdeNotFinite;
        if (const int status = newton_matrix(p, at, w, eval)) return status;
        fresh = true;
        continue;
      }
      if (small) return factorized ? newton_matrix(p, at, w, eval) : kStepSolved;
      // keep the matrix while the updates contract fast enough to reach the tolerance within newton_iter
      const real theta = moved / last;
      real predicted = moved / (1 - std::fmin(theta, real(0.5)));
      for (int left = O::newton_iter - iteration - 1; left > 0; --left) predicted *= theta;
      fresh = halvings > 0 || theta > contraction || !(predicted <= O::newton_tol * (1 + size));
      if (fresh)
        if (const int status = newton_matrix(p, at, w, eval)) return status;
      last = moved;
    }
    return kNewtonNotConverged;
  }

  /// The most halvings of a Newton step (a step shorter than 2^-max_halvings of Newton's fails).
  static constexpr int max_halvings = 20;
  /// Newton's matrix is kept while each update is at most this fraction of the one before (and the rate reaches the
  /// tolerance within newton_iter).
  static constexpr real contraction = real(0.1);

  /// y = y0 - t dy, t = 1, 1/2, ... the first with a finite residual whose merit decreases enough (any with `small`):
  /// the halvings it took (merit updated), or more than max_halvings.
  template <class E>
  static int damped_step(const real* u, const real* p, int at, bool small, real& merit, Workspace& w, E& eval) {
    for (int halving = 0; halving <= max_halvings; ++halving) {
      const real t = std::ldexp(real(1), -halving);
      for (int k = 0; k < m; ++k) w.y[k] = w.y0[k] - t * w.dy[k];
      if (!residual(u, p, at, w, eval)) continue;
      const real trial = residual_merit(w);
      if (small || trial <= (1 - real(1e-4) * t) * merit) {
        merit = trial;
        return halving;
      }
    }
    return max_halvings + 1;
  }

  /// The scale of unknown k in the states' units: h for a stage derivative (h K moves the states), 1 for an
  /// algebraic state.
  static constexpr real scale_of(int k) { return k / s < nx ? O::h : real(1); }

  /// ||D R||^2, D scaling each row by its unknown's scale_of().
  static real residual_merit(const Workspace& w) {
    real sum = 0;
    for (int k = 0; k < m; ++k) {
      const real v = scale_of(k) * w.r[k];
      sum += v * v;
    }
    return sum;
  }

  /// The stage points of y (in slot `at`), e there and the residual R (in w.r); false where it is not finite.
  template <class E>
  static bool residual(const real* u, const real* p, int at, Workspace& w, E& eval) {
    for (int i = 0; i < s; ++i) {
      real* v = w.v[at][i];
      for (int r = 0; r < nx; ++r) {
        real value = w.x[r];
        for (int j = 0; j < s; ++j) value += O::h * O::a[i][j] * w.y[unknown(j, r)];
        v[r] = value;
      }
      for (int q = 0; q < na; ++q) v[nx + q] = w.y[unknown(i, nx + q)];
      for (int c = 0; c < nu; ++c) v[ne + c] = u[c];
      eval.rate(v, p, w.e);
      for (int r = 0; r < ne; ++r) {
        w.r[unknown(i, r)] = (r < nx ? w.y[unknown(i, r)] : real(0)) - w.e[r];
        if (!std::isfinite(w.r[unknown(i, r)])) return false;
      }
    }
    return true;
  }

  /// e's Jacobian at the stage points of slot `at` and Newton's matrix M = dR/dy there, factorized (in w.LU[at]);
  /// the extents of M's rows and columns are noted as its entries are written, for anvil::dense::lu_factorize().
  template <class E>
  static int newton_matrix(const real* p, int at, Workspace& w, E& eval) {
    real(&M)[m][m] = w.LU[at];
    int(&last)[m] = w.last[at];
    for (int k = 0; k < m; ++k) {
      const bool state = k / s < nx;
      for (int l = 0; l < m; ++l) M[k][l] = real(0);
      if (state) M[k][k] = real(1);
      last[k] = w.bottom[k] = state ? k : -1;
    }
    auto add = [&](int row, int col, real value) {
      M[row][col] += value;
      last[row] = std::max(last[row], col);
      w.bottom[col] = std::max(w.bottom[col], row);
    };
    for (int i = 0; i < s; ++i) {
      real* J = w.J[at][i];
      eval.jacobian(w.v[at][i], p, J);
      for (int c = 0; c < ne; ++c)
        for (int e = O::jac_p[c]; e < O::jac_p[c + 1]; ++e) {
          if (!std::isfinite(J[e])) return kOdeNotFinite;
          const int row = unknown(i, O::jac_i[e]);
          if (c >= nx) {
            add(row, unknown(i, c), -J[e]);
          } else {
            for (int j = 0; j < s; ++j) add(row, unknown(j, c), -O::h * O::a[i][j] * J[e]);
          }
        }
    }
    return anvil::dense::lu_factorize(M, w.piv[at], w.first[at], last, w.bottom) ? kStepSolved : kNewtonSingular;
  }

  /// dY = dy/d[x; u] = M^-1 (J_x S + J_u [0 I]) at the converged stages of slot `at`.
  static void stage_sensitivities(int at, Workspace& w) {
    for (int k = 0; k < m; ++k)
      for (int c = 0; c < nz; ++c) w.dY[k][c] = 0;
    for (int i = 0; i < s; ++i) {
      const real* J = w.J[at][i];
      for (int c = 0; c < nx; ++c)
        for (int e = O::jac_p[c]; e < O::jac_p[c + 1]; ++e)
          for (int q = 0; q < nz; ++q) w.dY[unknown(i, O::jac_i[e])][q] += J[e] * w.S[c][q];
      for (int c = 0; c < nu; ++c)
        for (int e = O::jac_p[ne + c]; e < O::jac_p[ne + c + 1]; ++e) w.dY[unknown(i, O::jac_i[e])][nx + c] += J[e];
    }
    anvil::dense::lu_solve<nz>(w.LU[at], w.piv[at], w.first[at], w.last[at], &w.dY[0][0]);
  }

  /// DV_i = [S + h sum_j a_ij dK_j; dZ_i; 0 I] for the stage points of slot `at`.
  static void stage_point_sensitivities(int at, Workspace& w) {
    for (int i = 0; i < s; ++i) {
      real(&DV)[nv][nz] = w.DV[at][i];
      for (int r = 0; r < nx; ++r)
        for (int c = 0; c < nz; ++c) {
          real value = w.S[r][c];
          for (int j = 0; j < s; ++j) value += O::h * O::a[i][j] * w.dY[unknown(j, r)][c];
          DV[r][c] = value;
        }
      for (int q = 0; q < na; ++q)
        for (int c = 0; c < nz; ++c) DV[nx + q][c] = w.dY[unknown(i, nx + q)][c];
      for (int q = 0; q < nu; ++q)
        for (int c = 0; c < nz; ++c) DV[ne + q][c] = c == nx + q ? real(1) : real(0);
    }
  }

  /// The step's end: x += h sum_i b_i K_i; the algebraic states' guess for the next step: the last stage's.
  static void advance(Workspace& w) {
    for (int r = 0; r < nx; ++r)
      for (int i = 0; i < s; ++i) w.x[r] += O::h * O::b[i] * w.y[unknown(i, r)];
    for (int q = 0; q < na; ++q) w.z[q] = w.y[unknown(s - 1, nx + q)];
  }

  /// H += DV' Hf DV (upper triangle), Hf symmetric given by its upper triangle (CSC): T = Hf DV, then H += DV' T.
  static void add_second_order(const real* hf, const real (&DV)[nv][nz], real (&T)[nv][nz], real* H) {
    for (int a = 0; a < nv; ++a)
      for (int c = 0; c < nz; ++c) T[a][c] = 0;
    for (int b = 0; b < nv; ++b)
      for (int e = O::hess_p[b]; e < O::hess_p[b + 1]; ++e) {
        const int a = O::hess_i[e];
        for (int c = 0; c < nz; ++c) T[a][c] += hf[e] * DV[b][c];
        if (a != b)
          for (int c = 0; c < nz; ++c) T[b][c] += hf[e] * DV[a][c];
      }
    for (int c1 = 0; c1 < nz; ++c1)
      for (int a = 0; a < nv; ++a) {
        const real d = DV[a][c1];
        if (d == real(0)) continue;
        for (int c2 = c1; c2 < nz; ++c2) H[c1 * nz + c2] += d * T[a][c2];
      }
  }
};

}  // namespace integrators
}  // namespace anvil
#endif  // ANVIL_IMPLICIT_RK_HPP
