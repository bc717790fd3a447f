// anvil::mpc: the call of a generated MPC controller: the multiple-shooting NLP's parameter and bounds from the
// per-stage ones, the warm start (the previous solution shifted by one stage), and the SQP solve, either to
// convergence or as a real-time iteration (preparation and feedback).
//
// NLP layout: w = [x_0, u_0, ..., x_{N-1}, u_{N-1}, x_N, s] (s: the slacks of softened bounds); g = [x_0 - x_init;
// defects x_{k+1} - F_k; h_k (k < N); h_N; v_e + s_e; v_e - s_e]; the parameter [x_init; p rows; tuning] (param_rows
// rows of np: p_0 ... p_N, and over a scenario tree its transitions' too; tuning: the run-time weights and penalties:
// a call's, or tuning_default). Over a scenario tree the stages are its nodes (anvil.mpc.scenarios).
//
// The controller C (generated per OCP) provides: sizes nx, nu, N, np, nh, nhN, ns, nw, ng, n_tuning;
// tuning_default[n_tuning] (the build-time weights and penalties); real_time_iteration and
// warm_start (bools); tables soft_in_g[ns], soft_index[ns] (where each softened bound lives, in w's bounds or g's),
// soft_side[ns] (0: both bounds soft, 1: the lower alone, 2: the upper alone),
// shift_w[nw], shift_g[ng], shift_lam_x[nw] (the source of each entry when the solution is shifted by one stage; -1:
// zero); scaled, and with it w_scale[nw] and g_scale[ng] (the SQP works on w / w_scale and g / g_scale: bounds, x0 and
// guesses are scaled on the way in, the plan back on the way out; anvil.mpc.scaling); SQP (anvil::sqp::Solver of the
// NLP) and Workspace (members sqp: the SQP's workspace, and s: a State<C>).
// A controller calls solve() in full-SQP mode and feedback() (after prepare(), or preparing itself) in real-time
// iteration mode.
//
// Failure policy: a call whose SQP ends neither converged nor acceptable (nor, in real-time-iteration mode, after its
// one iteration) still returns a usable plan, said by Stats::fallback: the least-violation solution when the SQP
// ended infeasible (its feasibility restoration found the point that violates the constraints least, inputs within
// their bounds) where it follows the model (x_0 = x0 and every dynamics defect within defect_tol; in
// real-time-iteration mode, where no defect is the worst violation), else the call's initial guess (the previous plan
// shifted by one stage, or the cold guess) with its inputs clipped to their bounds, after which the next call starts
// cold, so no reset() is needed. A full-SQP call from the shifted solution of the previous call runs the SQP
// without its restoration phase; where that solve ends max_iterations (the restoration would have begun: the QP at the
// shifted plan is inconsistent, as after a jump of the state away from the plan) or numerical_error, the SQP runs once
// more from the cold guess (with restoration), within the time left of the call's max_time. From a shifted
// least-violation plan (the previous call was infeasible) the SQP begins in its restoration phase: a call that stays
// infeasible picks up where the last one ended.
#ifndef ANVIL_MPC_HPP
#define ANVIL_MPC_HPP
#include <cmath>
#include <type_traits>

#include "anvil/sqp.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace mpc {

/// What one call did.
template <class SQPStats>
struct Stats {
  int status = anvil::sqp::numerical_error;  ///< anvil::sqp::Status
  int iterations = 0;                        ///< SQP iterations (both solves' when it restarted cold)
  bool restarted_cold = false;               ///< the warm-started solve failed and the SQP ran again, cold
  int fallback = 0;                          ///< 0: the SQP's solution; 1: the shifted plan; 2: the least-violation
  double cost = 0.0;                         ///< optimal value of the OCP's cost (including slack penalties)
  double solve_time = 0.0;                   ///< seconds spent in call() (0 without a clock: ANVIL_NO_CLOCK)
  SQPStats sqp;                              ///< the SQP solver's per-iteration history and diagnostics
};

/// The NLP's vectors and the previous solution (for the shifted warm start), in place.
template <class S>
struct State {
  using real = typename S::real;
  // the guess w (kept for the fallback) and the SQP's solution w_out; the multipliers are updated in place: a failed
  // solve's are never reused (the next call starts cold, or zeroes them)
  anvil::Array<real, S::nw> w, w_out, lbw, ubw, lam_x;
  anvil::Array<real, S::ng> lbg, ubg, lam_g;
  anvil::Array<real, S::nx + S::param_rows * S::np + S::n_tuning> params;
  int guess = 0;  ///< 0: cold start, 1: shift the previous solution, 2: w and the multipliers hold the guess, 3: shift
                  ///< the previous (least-violation) solution, its multipliers zero
  bool assembled = false;  ///< the NLP's bounds and parameter of a call are in place
  bool prepared = false;   ///< real-time iteration: the QP at the guess is prepared
};

/// Whether a QP backend keeps the factorization of its last solve's stage QP (QP::stage_gain: the Riccati one).
template <class QP, class = void>
struct keeps_stage_gain : std::false_type {};
template <class QP>
struct keeps_stage_gain<QP, std::void_t<decltype(&QP::stage_gain)>> : std::true_type {};

template <class C>
class Controller {
 public:
  using WS = typename C::Workspace;
  using SQP = typename C::SQP;
  using real = typename SQP::real;  ///< the scalar type the controller computes in (double, or float)
  using StatsT = Stats<typename SQP::StatsT>;
  static constexpr int nx = C::nx, nu = C::nu, nz = nx + nu, N = C::N, np = C::np, nh = C::nh, nhN = C::nhN;
  static constexpr int ns = C::ns, nw = C::nw, ng = C::ng, soft_rows = ng - 2 * ns;
  /// the largest dynamics defect of a plan (see the failure policy)
  static constexpr real defect_tol = anvil::by_precision<real>(1e-6, 1e-4f);

  /// du_0/dx_0 (nu x nx_model, row-major) at the last call's solution, from the Riccati QP's last factorization (the
  /// linearization at the solution when the call converged in full-SQP mode: the caller checks its status); false
  /// where the QP solver keeps none (OSQP, the sparse interior point).
  static bool du0_dx0(const WS& ws, int nx_model, real* K) {
    using QP = typename SQP::QP;
    if constexpr (keeps_stage_gain<QP>::value) {
      int rows[nu], cols[nx];
      for (int i = 0; i < nu; ++i) rows[i] = nx + i;  // w = [x_0, u_0, ...]
      for (int j = 0; j < nx; ++j) cols[j] = j;
      if (!QP::stage_gain(ws.sqp.qp, rows, nu, cols, nx_model, K)) return false;
      for (int i = 0; i < nu; ++i)  // the gain between the model's units
        for (int j = 0; j < nx_model; ++j) K[i * nx_model + j] *= scale(nx + i) / scale(j);
      return true;
    } else {
      (void)ws, (void)nx_model, (void)K;
      return false;
    }
  }

  static void reset(WS& ws) {
    ws.s.guess = 0;
    ws.s.prepared = false;
  }

  static void set_guess(const real* x, const real* u, WS& ws) {
    auto& s = ws.s;
    for (int k = 0; k <= N; ++k)
      for (int i = 0; i < nx; ++i) s.w[k * nz + i] = x[k * nx + i] / scale(k * nz + i);
    for (int k = 0; k < N; ++k)
      for (int i = 0; i < nu; ++i) s.w[k * nz + nx + i] = u[k * nu + i] / scale(k * nz + nx + i);
    for (int e = 0; e < ns; ++e) s.w[N * nz + nx + e] = 0.0;
    for (int i = 0; i < ng; ++i) s.lam_g[i] = 0.0;
    for (int i = 0; i < nw; ++i) s.lam_x[i] = 0.0;
    s.guess = 2;
    s.prepared = false;
  }

  /// A no-op unless a real-time iteration has a guess to prepare at: after a call, with a warm start (without one,
  /// the next guess depends on the next state).
  static int prepare(WS& ws) {
    const auto& s = ws.s;
    const bool shift = s.guess == 1 || s.guess == 3;
    if (!C::real_time_iteration || s.prepared || !s.assembled || s.guess == 0 || (shift && !C::warm_start))
      return anvil::sqp::converged;
    const bool warm_qp = shifted_qp(ws);
    initial_guess(nullptr, nullptr, nullptr, ws);
    return prepare_at_guess(warm_qp, ws);
  }

  /// Real-time iteration: the feedback phase (preparing first unless prepare() ran since the last call); no QP where
  /// the linearization point already meets tol.
  static int feedback(const real* x0, const real* p, const real* lbx, const real* ubx, const real* lbu,
                      const real* ubu, const real* lbh, const real* ubh, const real* lbhN,
                      const real* ubhN, const real* tuning, real* x, real* u, StatsT& stats, WS& ws,
                      double tol) {
    auto& s = ws.s;
    const double start = anvil::now();
    assemble(x0, p, lbx, ubx, lbu, ubu, lbh, ubh, lbhN, ubhN, tuning, ws);
    if (!s.prepared) {
      const bool warm_qp = shifted_qp(ws);
      initial_guess(x0, lbu, ubu, ws);
      prepare_at_guess(warm_qp, ws);
    }
    for (int i = 0; i < nw; ++i) s.w_out[i] = s.w[i];
    real f = 0.0;
    stats.status = SQP::rti_feedback(s.params.data(), s.lbw.data(), s.ubw.data(), s.lbg.data(), s.ubg.data(),
                                     s.w_out.data(), &f, s.lam_g.data(), s.lam_x.data(), stats.sqp, ws.sqp, tol);
    finish(f, x0, lbu, ubu, x, u, stats, ws, start);
    return stats.status;
  }

  /// Full SQP: iterate to convergence from the warm (or cold) guess, within the limits; a failed shifted warm start
  /// is retried from the cold guess (see the top of this file).
  static int solve(const real* x0, const real* p, const real* lbx, const real* ubx, const real* lbu,
                   const real* ubu, const real* lbh, const real* ubh, const real* lbhN, const real* ubhN,
                   const real* tuning, real* x, real* u, StatsT& stats, WS& ws, anvil::sqp::Limits limits) {
    auto& s = ws.s;
    const double start = anvil::now();
    assemble(x0, p, lbx, ubx, lbu, ubu, lbh, ubh, lbhN, ubhN, tuning, ws);
    const bool shifted = (s.guess == 1 || s.guess == 3) && C::warm_start;
    const bool after_infeasible = s.guess == 3;
    const bool warm_qp = shifted_qp(ws);
    initial_guess(x0, lbu, ubu, ws);
    real f = 0.0;
    anvil::sqp::Limits warm = limits;
    warm.restore = !shifted || after_infeasible;
    warm.restore_first = after_infeasible;
    warm.shifted = warm_qp;
    stats.status = solve_from_guess(x0, &f, stats, ws, warm);
    stats.restarted_cold = false;
    const int warm_iterations = stats.sqp.iterations;
    const double spent = anvil::now() - start;
    if (shifted && (stats.status == anvil::sqp::max_iterations || stats.status == anvil::sqp::numerical_error) &&
        spent < limits.max_time) {
      cold_guess(x0, lbu, ubu, ws);
      limits.max_time -= spent;
      stats.status = solve_from_guess(x0, &f, stats, ws, limits);
      stats.restarted_cold = true;
    }
    finish(f, x0, lbu, ubu, x, u, stats, ws, start);
    if (stats.restarted_cold) stats.iterations += warm_iterations;
    return stats.status;
  }

 private:
  /// NLP variable i's scale factor (1 unless C::scaled).
  static real scale(int i) {
    if constexpr (C::scaled) {
      return C::w_scale[i];
    } else {
      (void)i;
      return real(1);
    }
  }

  /// dst[i] = src[table[i]] (0 where table[i] < 0); in place (dst == src) too: every table[i] >= i (the shift tables
  /// move entries towards the start only).
  static void gather(real* dst, const real* src, const int* table, int n) {
    for (int i = 0; i < n; ++i) dst[i] = table[i] >= 0 ? src[table[i]] : real(0);
  }

  /// The dynamics rows of g (x_0 - x0, then the defects) at the SQP's last iterate are all within defect_tol.
  static bool dynamics_met(const real* g) {
    for (int i = 0; i < nx * (N + 1); ++i)
      if (!(std::fabs(g[i]) <= defect_tol)) return false;
    return true;
  }

  static bool finite(const real* v, int n) {
    for (int i = 0; i < n; ++i)
      if (!std::isfinite(v[i])) return false;
    return true;
  }

  /// One SQP solve from the guess in s.w and the multipliers (x_0 set to x0).
  static int solve_from_guess(const real* x0, real* f, StatsT& stats, WS& ws, anvil::sqp::Limits limits) {
    auto& s = ws.s;
    for (int i = 0; i < nx; ++i) s.w[i] = x0[i] / scale(i);
    return SQP::call(s.w.data(), s.params.data(), s.lbw.data(), s.ubw.data(), s.lbg.data(), s.ubg.data(),
                     s.lam_g.data(), s.lam_x.data(), s.w_out.data(), f, s.lam_g.data(), s.lam_x.data(),
                     stats.sqp, ws.sqp, limits);
  }

  /// x_k = x0 and u_k = 0 clipped to its bounds. NOTE: a rollout of the model from x0 was tried: for an unstable
  /// plant (the cart-pole) it starts far from the optimum and the first solve took 25 SQP iterations instead of 4.
  static void cold_guess(const real* x0, const real* lbu, const real* ubu, WS& ws) {
    auto& s = ws.s;
    for (int k = 0; k <= N; ++k)
      for (int i = 0; i < nx; ++i) s.w[k * nz + i] = x0[i] / scale(k * nz + i);
    for (int k = 0; k < N; ++k)
      for (int i = 0; i < nu; ++i) {
        const real f = scale(k * nz + nx + i);
        s.w[k * nz + nx + i] = std::fmin(std::fmax(real(0), lbu[k * nu + i] / f), ubu[k * nu + i] / f);
      }
    for (int e = 0; e < ns; ++e) s.w[N * nz + nx + e] = 0.0;
    for (int i = 0; i < ng; ++i) s.lam_g[i] = 0.0;
    for (int i = 0; i < nw; ++i) s.lam_x[i] = 0.0;
  }

  /// The NLP's parameter [x_init; p_0 ... p_N; tuning] (nullptr: tuning_default) and bounds on w and g from the
  /// per-stage bounds.
  static void assemble(const real* x0, const real* p, const real* lbx, const real* ubx, const real* lbu,
                       const real* ubu, const real* lbh, const real* ubh, const real* lbhN,
                       const real* ubhN, const real* tuning, WS& ws) {
    constexpr real inf = real(HUGE_VAL);
    auto& s = ws.s;
    real* lbw = s.lbw.data();
    real* ubw = s.ubw.data();
    real* lbg = s.lbg.data();
    real* ubg = s.ubg.data();
    for (int i = 0; i < nx; ++i) s.params[i] = x0[i];
    for (int i = 0; i < C::param_rows * np; ++i) s.params[nx + i] = p[i];
    for (int i = 0; i < C::n_tuning; ++i)
      s.params[nx + C::param_rows * np + i] = tuning ? tuning[i] : C::tuning_default[i];
    for (int k = 0; k <= N; ++k) {
      for (int i = 0; i < nx; ++i) {
        lbw[k * nz + i] = k == 0 ? -inf : lbx[k * nx + i];
        ubw[k * nz + i] = k == 0 ? inf : ubx[k * nx + i];
      }
      for (int i = 0; k < N && i < nu; ++i) {
        lbw[k * nz + nx + i] = lbu[k * nu + i];
        ubw[k * nz + nx + i] = ubu[k * nu + i];
      }
    }
    for (int e = 0; e < ns; ++e) {
      lbw[N * nz + nx + e] = 0.0;
      ubw[N * nz + nx + e] = inf;
    }
    for (int i = 0; i < nx * (N + 1); ++i) {
      lbg[i] = 0.0;
      ubg[i] = 0.0;
    }
    for (int i = 0; i < N * nh; ++i) {
      lbg[nx * (N + 1) + i] = lbh[i];
      ubg[nx * (N + 1) + i] = ubh[i];
    }
    for (int i = 0; i < nhN; ++i) {
      lbg[nx * (N + 1) + N * nh + i] = lbhN[i];
      ubg[nx * (N + 1) + N * nh + i] = ubhN[i];
    }
    if constexpr (C::scaled) {  // the SQP's units; a softened bound moves below, already scaled as its slack's row
      for (int i = 0; i < nw; ++i) {
        lbw[i] /= C::w_scale[i];
        ubw[i] /= C::w_scale[i];
      }
      for (int i = 0; i < soft_rows; ++i) {
        lbg[i] /= C::g_scale[i];
        ubg[i] /= C::g_scale[i];
      }
    }
    for (int e = 0; e < ns; ++e) {
      // a softened bound moves from its hard place to the row v + s >= lb (v - s <= ub); a one-sided one
      // (C::soft_side: 1 the lower, 2 the upper alone) leaves the other bound hard where it was, its row free
      real* lo = C::soft_in_g[e] ? &lbg[C::soft_index[e]] : &lbw[C::soft_index[e]];
      real* hi = C::soft_in_g[e] ? &ubg[C::soft_index[e]] : &ubw[C::soft_index[e]];
      const bool soft_lower = C::soft_side[e] != 2, soft_upper = C::soft_side[e] != 1;
      lbg[soft_rows + e] = soft_lower ? *lo : -inf;
      ubg[soft_rows + e] = inf;
      lbg[soft_rows + ns + e] = -inf;
      ubg[soft_rows + ns + e] = soft_upper ? *hi : inf;
      if (soft_lower) *lo = -inf;
      if (soft_upper) *hi = inf;
    }
    s.assembled = true;
  }

  /// The initial guess: the previous solution shifted by one stage (primal and dual), the set_guess() one, or cold.
  static void initial_guess(const real* x0, const real* lbu, const real* ubu, WS& ws) {
    auto& s = ws.s;
    if ((s.guess == 1 || s.guess == 3) && C::warm_start) {
      gather(s.w.data(), s.w_out.data(), C::shift_w, nw);
      gather(s.lam_g.data(), s.lam_g.data(), C::shift_g, ng);
      gather(s.lam_x.data(), s.lam_x.data(), C::shift_lam_x, nw);
      // NOTE: a least-violation solution's multipliers are the restoration's violation prices, not the OCP's
      if (s.guess == 3) {
        for (int i = 0; i < ng; ++i) s.lam_g[i] = 0.0;
        for (int i = 0; i < nw; ++i) s.lam_x[i] = 0.0;
      }
    } else if (s.guess != 2) {
      cold_guess(x0, lbu, ubu, ws);
    }
    s.guess = 2;  // w and the multipliers now hold the guess
  }

  /// Whether the SQP's solution is the plan: converged, acceptable, or a real-time iteration's step.
  static bool solved(int status) {
    return status == anvil::sqp::converged || status == anvil::sqp::acceptable ||
           (C::real_time_iteration && status == anvil::sqp::max_iterations);
  }

  /// Outputs (the failure policy applied, see the top of this file) and the solution kept for the next warm start.
  static void finish(real f, const real* x0, const real* lbu, const real* ubu, real* x, real* u,
                     StatsT& stats, WS& ws, double start) {
    auto& s = ws.s;
    stats.iterations = stats.sqp.iterations;
    stats.cost = f;
    // NOTE: a result with NaN/inf would poison the next warm start: the next call then starts cold.
    const bool usable = finite(s.w_out.data(), nw) && finite(s.lam_g.data(), ng) && finite(s.lam_x.data(), nw);
    // NOTE: a point off the model is no plan: shift instead. A real-time iteration's step leaves defects of the
    // linearization's order: its plan counts where no defect is the worst violation
    const int worst = stats.sqp.worst_constraint;
    const bool follows_model =
        usable && (C::real_time_iteration ? worst < 0 || worst >= nx * (N + 1) : dynamics_met(ws.sqp.v.g.data()));
    stats.fallback = solved(stats.status) ? 0 : stats.status == anvil::sqp::infeasible && follows_model ? 2 : 1;
    if (stats.fallback == 1) {
      for (int i = 0; i < nw; ++i) s.w_out[i] = s.w[i];
      for (int i = 0; i < nx; ++i) s.w_out[i] = x0[i] / scale(i);
      for (int k = 0; k < N; ++k)
        for (int i = 0; i < nu; ++i) {
          const int at = k * nz + nx + i;
          s.w_out[at] = std::fmin(std::fmax(s.w_out[at], lbu[k * nu + i] / scale(at)), ubu[k * nu + i] / scale(at));
        }
    }
    for (int k = 0; k <= N; ++k)
      for (int i = 0; i < nx; ++i) x[k * nx + i] = s.w_out[k * nz + i] * scale(k * nz + i);
    for (int k = 0; k < N; ++k)
      for (int i = 0; i < nu; ++i) u[k * nu + i] = s.w_out[k * nz + nx + i] * scale(k * nz + nx + i);
    s.guess = !usable || stats.fallback == 1 ? 0 : stats.fallback == 2 ? 3 : 1;
    s.prepared = false;
    stats.solve_time = anvil::now() - start;
  }

  /// Whether the first QP of the coming solve starts warm from the previous call's last QP, shifted: when the guess
  /// will be the previous solution shifted and that was the OCP's (not a least-violation point, after elastic QPs).
  static bool shifted_qp(const WS& ws) { return ws.s.guess == 1 && C::warm_start; }

  static int prepare_at_guess(bool shifted, WS& ws) {
    auto& s = ws.s;
    const int status = SQP::rti_prepare(s.w.data(), s.params.data(), s.lam_g.data(), s.lbw.data(), s.ubw.data(),
                                        s.lbg.data(), s.ubg.data(), ws.sqp, shifted);
    s.prepared = true;  // a failed preparation is reported by the feedback
    return status;
  }
};

}  // namespace mpc
}  // namespace anvil
#endif  // ANVIL_MPC_HPP
