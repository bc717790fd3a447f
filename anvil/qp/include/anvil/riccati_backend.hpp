// anvil::qp::RiccatiBackend: the QP contract (anvil/qp.hpp) met by the stage-structured interior point
// (anvil/riccati.hpp), for a QP whose variables and rows map onto the stages of an optimal control problem.
//
// The mapping is a set of tables into the solver's Data and iterate viewed as flat arrays of reals (the scalar type
// it computes in), generated for the QP's patterns: load() scatters P (upper triangle, mirrored) and A into the stage
// blocks, solve() scatters q, l and u, runs the interior point and gathers the step and the multipliers back. Rows of
// A are of three kinds: the initial rows (x_0 = x0: J d = l with a coefficient c on x_0, scaled by 1/c), the dynamics
// rows (x_{k+1} - A_k x_k - B_k u_k = c_k once scaled by the coefficient of x_{k+1}: the dynamics of the stage QP,
// their multipliers -pi_k / c)
// and stage rows (rows of G_k, their multipliers lam). The initial rows' multipliers close the stationarity of x_0,
// which the stage QP eliminates. An initial or dynamics row is an equality: only its lower bound is read. Where x_0
// is fixed by its bounds (StageLayout.initial_bounds), its identity rows are its initial rows and box rows alike.
//
// Layout L: n, m, nnz_P, nnz_A, nx (states), data_size (reals in Data); tol_min and max_iter (the interior point's
// tightest tolerance and iteration limit); IPM (the anvil::qp::Riccati solver); P_to_data[nnz_P], P_mirror[nnz_P]
// (-1: on the diagonal), A_to_data[nnz_A] (-1: an identity the stage QP implies), A_scale[nnz_A] (the factor an entry
// takes into the stage QP; the box rows' unit coefficients are the stage QP's own), q_to_data[n], l_to_data[m],
// u_to_data[m] (-1: none), l_scale[m], primal_from[n], dual_from[m] (offsets into the interior point's iterate, its
// Workspace's leading arrays; -1: none), dual_row[m] (the row whose multiplier it is; -1: none), dual_scale[m],
// initial_rows[nx], initial_scale[nx], x0_to_data[nx] (where x0 goes), elastic_to_data[n_elastic] (the prices of
// the rows set_elastic() relaxes: the stage rows and the bounds on states); n_soft eliminated slacks of soft
// constraints (price_soft_rows) and their
// soft_var[n_soft], soft_box[n_soft] and, per side (2 n_soft: the lower row, the upper row), soft_row (-1: none),
// soft_qrow, soft_bound, soft_z, soft_w; loads_derivatives, and with it (an SQP's QP, load_derivatives) n_hess,
// hess_to_data[n_hess], hess_mirror[n_hess], diag_to_data[n], diag_mirror[n] (an eliminated slack's second row;
// -1: none), n_unloaded, unloaded_to_data[n_unloaded] (the places of P's entries H has none for, a diagonal's
// regularization alone), n_jac, jac_from[n_jac] (the Jacobian's entries that enter
// the stage QP), jac_to_data[n_jac] and jac_scale[n_jac]. Workspace W: data, ipm (the solver's Data and Workspace,
// where its solve leaves the solution), d (n), y (m), iterations. The screening before a solve is the solver's own
// Riccati factorization on the equalities (IPM::convex_on_equalities), so the backend needs no memory beyond the stage
// QP's.
#ifndef ANVIL_RICCATI_BACKEND_HPP
#define ANVIL_RICCATI_BACKEND_HPP
#include <cmath>

#include "anvil/qp.hpp"
#include "anvil/riccati.hpp"

namespace anvil {
namespace qp {

template <class L, class W>
struct RiccatiBackend {
  using Workspace = W;
  using IPM = typename L::IPM;
  using real = typename IPM::real;
  /// The regularization of the screening's Hessian (as a KKT factorization's primal regularization: a Hessian that
  /// is only semidefinite, zero on the slacks of L1 penalties, passes; above the factorization's smallest pivot)
  static constexpr real screening_regularization = anvil::by_precision<real>(1e-9, 5e-5f);
  static_assert(sizeof(typename IPM::Data) == L::data_size * sizeof(real), "Data is a flat array of reals");

  static void reset(W& ws) {
    IPM::reset(ws.ipm);
    ws.iterations = 0;
  }

  /// The next solve may start warm from the last solution moved one stage earlier (IPM::shift).
  static void shift(W& ws) { IPM::shift(ws.ipm); }

  /// Scatters P and A into the stage blocks; screens them when asked: is P positive definite on the null space of
  /// the equalities of l and u (the interior point tells a nonconvex QP itself when it solves it)?
  static int load(const real* P, const real* A, const real* l, const real* u, bool screen, W& ws) {
    real* data = clear(ws);
    for (int e = 0; e < L::nnz_P; ++e) {
      data[L::P_to_data[e]] += P[e];
      if (L::P_mirror[e] >= 0) data[L::P_mirror[e]] += P[e];
    }
    for (int e = 0; e < L::nnz_A; ++e)
      if (L::A_to_data[e] >= 0) data[L::A_to_data[e]] = L::A_scale[e] * A[e];
    return finish_load(l, u, screen, ws);
  }

  /// load() of an SQP's QP from its derivatives (Layout::loads_derivatives: the problem's DerivativeSources): P =
  /// triu(hess) + reg I and A = [jac; I], scattered straight into the stage blocks (the SQP keeps no P and A).
  static int load_derivatives(const real* hess, real reg, const real* jac, const real* l, const real* u, bool screen,
                              W& ws) {
    // NOTE: every place of P takes one entry: H's are assigned (after the elastic prices are cleared: a soft slack's
    // curvature is its rows' price), the others cleared for the regularization, not the whole of P cleared first
    real* data = clear_elastic(ws);
    for (int e = 0; e < L::n_unloaded; ++e) data[L::unloaded_to_data[e]] = 0.0;
    for (int e = 0; e < L::n_hess; ++e) {
      data[L::hess_to_data[e]] = hess[e];
      if (L::hess_mirror[e] >= 0) data[L::hess_mirror[e]] = hess[e];
    }
    for (int j = 0; j < L::n; ++j) {
      data[L::diag_to_data[j]] += reg;
      if (L::diag_mirror[j] >= 0) data[L::diag_mirror[j]] += reg;  // an eliminated slack's second row
    }
    for (int e = 0; e < L::n_jac; ++e) data[L::jac_to_data[e]] = L::jac_scale[e] * jac[L::jac_from[e]];
    return finish_load(l, u, screen, ws);
  }

  /// Solves to tol within [tol_min, 1e-6] (at least the rounding level of q: ipm::attainable); warm starts from the
  /// previous solution when it was solved.
  static int solve(const real* q, const real* l, const real* u, real tol, bool warm, W& ws) {
    real* data = reinterpret_cast<real*>(&ws.data);
    for (int j = 0; j < L::n; ++j)
      if (L::q_to_data[j] >= 0) data[L::q_to_data[j]] = q[j];
    scatter_bounds(l, u, ws);
    price_soft_rows(q, l, data);
    const real tol_qp = ipm::attainable(std::fmax(real(L::tol_min), std::fmin(real(1e-6), tol)), q, L::n);
    ipm::Residuals<real> residuals;
    const int status =
        IPM::solve_in_place(ws.data, tol_qp, L::max_iter, ws.ipm, warm, residuals, ws.iterations, ws.deadline);
    const auto& it = ws.ipm;  // the solution, where the interior point leaves it
    const real* iterate = reinterpret_cast<const real*>(&it);
    for (int j = 0; j < L::n; ++j) ws.d[j] = L::primal_from[j] >= 0 ? iterate[L::primal_from[j]] : real(0);
    for (int r = 0; r < L::m; ++r) {
      const int row = L::dual_row[r];
      ws.y[r] = row >= 0               ? IPM::multiplier(ipm_row(it, row))
                : L::dual_from[r] >= 0 ? L::dual_scale[r] * iterate[L::dual_from[r]]
                                       : real(0);
    }
    // the initial rows: their multipliers close the stationarity of x_0, which the stage QP eliminated: its residual
    // g + H z + A'pi + G'lam in x_0 at the solution (the interior point ends on its residuals at the last iterate)
    for (int i = 0; i < IPM::nx; ++i) ws.y[L::initial_rows[i]] = -it.r_z[0][i] * L::initial_scale[i];
    gather_soft(q, l, ws);
    return status;
  }

  /// Makes the stage rows and the bounds on states elastic (violated at `weight` per unit, an L1 penalty) for the
  /// solves until the next load(), which makes every row hard again; input bounds and dynamics stay hard, so the
  /// elastic QP of a consistent OCP (x_{k+1} free to follow the dynamics) is always feasible.
  static void set_elastic(real weight, W& ws) {
    real* data = reinterpret_cast<real*>(&ws.data);
    for (int e = 0; e < L::n_elastic; ++e) data[L::elastic_to_data[e]] = weight;
  }

  /// d u_0 / d x_0 from the last solve's last factorization: its first stage's feedback gain K_0, under the interior
  /// point's row weights, which make the active rows hard and the others free as it converges (the sensitivity of
  /// the QP's solution to its initial state, the active set held). out[r * n_cols + c] for the QP's variables rows[r]
  /// (inputs of stage 0) and cols[c] (states of stage 0); false where one is not (an eliminated slack, another stage).
  static bool stage_gain(const W& ws, const int* rows, int n_rows, const int* cols, int n_cols, real* out) {
    constexpr int u_at = (IPM::N + 1) * IPM::nx;  // the iterate: x (N + 1 stages), then u
    real K[IPM::nu][IPM::nx];
    IPM::feedback_gain(ws.ipm, K);
    for (int r = 0; r < n_rows; ++r)
      for (int c = 0; c < n_cols; ++c) {
        const int i = L::primal_from[rows[r]] - u_at, j = L::primal_from[cols[c]];
        if (L::primal_from[rows[r]] < 0 || i < 0 || i >= IPM::nu || j < 0 || j >= IPM::nx) return false;
        out[r * n_cols + c] = K[i][j];
      }
    return true;
  }

  static const real* primal(const W& ws) { return ws.d.data(); }
  static const real* dual(const W& ws) { return ws.y.data(); }
  static int iterations(const W& ws) { return ws.iterations; }

 private:
  /// The stage QP's data, its entries of P and the elastic prices zeroed, ready for a load.
  static real* clear(W& ws) {
    // NOTE: the data starts zeroed (Workspace) and only the tables write it, so a load clears what it accumulates
    // into (P) and the elastic prices of the last set_elastic(), not the whole (mostly structurally zero) stage QP;
    // rows no table writes (padding inputs fixed at 0) keep lower = upper = 0: equalities
    real* data = clear_elastic(ws);
    for (int e = 0; e < L::nnz_P; ++e) {
      data[L::P_to_data[e]] = 0.0;
      if (L::P_mirror[e] >= 0) data[L::P_mirror[e]] = 0.0;
    }
    return data;
  }

  /// The stage QP's data, the elastic prices of the last set_elastic() zeroed.
  static real* clear_elastic(W& ws) {
    real* data = reinterpret_cast<real*>(&ws.data);
    for (int e = 0; e < L::n_elastic; ++e) data[L::elastic_to_data[e]] = 0.0;
    return data;
  }

  /// The interior point's row `row` (those of stage N after the others, as dual_row and soft_row count them).
  static const auto& ipm_row(const typename IPM::Workspace& it, int row) {
    return row < IPM::N * IPM::mg ? it.rows[row / IPM::mg][row % IPM::mg] : it.rowsN[row - IPM::N * IPM::mg];
  }

  /// The rows of the eliminated slacks (soft constraints): a slack s >= s_min (s_min = l, the step's lower bound,
  /// -s_current), of cost q s + w s^2 / 2, relaxes its lower row (row + s >= lo) and its upper row (row - s <= hi).
  /// In its violation v = s - s_min >= 0 each row is elastic: prices z = q + w s_min (at least 0) and w, bounds lo -
  /// s_min and hi + s_min (w, P's entry, was loaded into the rows' w).
  static void price_soft_rows(const real* q, const real* l, real* data) {
    for (int s = 0; s < L::n_soft; ++s) {
      const real s_min = l[L::soft_box[s]], q_s = q[L::soft_var[s]];
      for (int side = 0; side < 2; ++side) {
        const int e = 2 * s + side;
        if (L::soft_row[e] < 0) continue;
        data[L::soft_z[e]] = std::fmax(real(0), q_s + data[L::soft_w[e]] * s_min);
        data[L::soft_bound[e]] += side == 0 ? -s_min : s_min;
      }
    }
  }

  /// The eliminated slacks' steps (their rows' violations; at most one side is violated at a solution) and their
  /// bounds' multipliers, from the slack's stationarity q + w d - lam_lo - lam_hi + y_box = 0 (lam_lo = -y of the
  /// lower row, lam_hi = y of the upper row). The elastic rows price each side up to q + w d on its own, the slack
  /// both together: where a row holds with both sides' multipliers summing to more (a softened equality met exactly),
  /// both give up half the excess, which keeps their difference (the row's net multiplier) and the slack's price.
  static void gather_soft(const real* q, const real* l, W& ws) {
    const real* data = reinterpret_cast<const real*>(&ws.data);
    for (int s = 0; s < L::n_soft; ++s) {
      real violation = 0, w = 0, lam[2] = {0, 0};
      for (int side = 0; side < 2; ++side) {
        const int e = 2 * s + side, row = L::soft_row[e];
        if (row < 0) continue;
        const auto& r = ipm_row(ws.ipm, row);
        // NOTE: the row's violation at the last iterate, -distance = s - t - r (its residual r = distance - t + s): s
        // alone is mu/m > 0 where the row holds (a slack of that size cost more than the last steps of an SQP gain,
        // whose line search then stalled), s - t alone leaves the row violated by t (float32: above its tolerance)
        const auto& q_side = side == 0 ? r.lo : r.hi;
        violation += std::fmax(real(0), q_side.s - q_side.t - q_side.r);
        w = data[L::soft_w[e]];
        lam[side] = side == 0 ? -ws.y[L::soft_qrow[e]] : ws.y[L::soft_qrow[e]];
      }
      const real d = violation + l[L::soft_box[s]];
      const real price = q[L::soft_var[s]] + w * d;  // the slack's marginal cost at its new value
      const real excess = lam[0] + lam[1] - price;
      if (excess > real(0) && L::soft_row[2 * s] >= 0 && L::soft_row[2 * s + 1] >= 0) {
        lam[0] = std::fmax(real(0), lam[0] - real(0.5) * excess);  // (>= 0 but for rounding)
        lam[1] = std::fmax(real(0), lam[1] - real(0.5) * excess);
        ws.y[L::soft_qrow[2 * s]] = -lam[0];
        ws.y[L::soft_qrow[2 * s + 1]] = lam[1];
      }
      ws.d[L::soft_var[s]] = d;
      // NOTE: the slack has a lower bound only: its multiplier is <= 0 (rounding must not make it an upper bound's)
      ws.y[L::soft_box[s]] = std::fmin(real(0), lam[0] + lam[1] - price);
    }
  }

  /// A load's end: the screening, when asked.
  static int finish_load(const real* l, const real* u, bool screen, W& ws) {
    if (!screen) return solved;
    scatter_bounds(l, u, ws);
    return IPM::convex_on_equalities(ws.data, screening_regularization, ws.ipm) ? solved : nonconvex;
  }

  /// The rows' bounds l and u into the stage QP's x0, c, lo and hi (x0 from the initial rows' lower bounds: rows of
  /// g, or x_0's own bounds, which then also bound its box rows).
  static void scatter_bounds(const real* l, const real* u, W& ws) {
    real* data = reinterpret_cast<real*>(&ws.data);
    for (int r = 0; r < L::m; ++r) {
      if (L::l_to_data[r] >= 0) data[L::l_to_data[r]] = L::l_scale[r] * l[r];
      if (L::u_to_data[r] >= 0) data[L::u_to_data[r]] = u[r];
    }
    for (int i = 0; i < L::nx; ++i) data[L::x0_to_data[i]] = L::initial_scale[i] * l[L::initial_rows[i]];
  }
};

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_RICCATI_BACKEND_HPP
