// anvil::sqp: the SQP loop of a generated NLP solver, min f(x, p) s.t. lbg <= g(x, p) <= ubg, lbx <= x <= ubx.
//
// Exact Hessian regularized only when a QP is nonconvex (a multiple of the identity, x10 per retry), a backtracking
// filter line search (objective vs L1 violation, Waechter and Biegler). When the linearized constraints are
// inconsistent, a QP fails or the filter rejects every step, a restoration phase (elastic mode) solves the elastic NLP
// min f + rho (L1 violation of the elastic rows) s.t. the rows the elastic QP keeps hard, by elastic QPs and a filter
// line search of its own (the hard rows' L1 violation vs that penalty), back to the optimality phase once the violation
// is reduced enough and the point is acceptable to the optimality filter, or ending `infeasible` at a stationary point
// of the elastic NLP with violation left (the least-violation point: the price rises while it still buys less
// violation). Termination on primal and dual infeasibility and complementarity (tol), at an acceptable level
// (acceptable_tol for acceptable_iter iterations in a row, or a stalled line search there), on the iteration or time
// limit; NaN/inf diagnostics naming the function and output. Every QP goes through the QP contract (anvil/qp.hpp): the
// loop never sees how it is solved.
//
// The problem P (generated per NLP) provides:
//   sizes: nx, ng, max_iter, nnz_jac, nnz_hess, nnz_P, nnz_A, nnz_Ae, elastic_rows (Elastic is a backend with elastic
//     rows, set_elastic(), over the QP's patterns; else it solves the slack form below, whose vectors the workspace
//     then holds);
//   settings: name (for verbose output), tol, acceptable_tol, acceptable_iter, max_time, reg_min, reg_max, armijo,
//     backtrack, min_step, verbose, elastic_in_qp (Elastic is QP itself), convex_hessian (the
//     Hessian is PSD wherever evaluated: the real-time iteration loads its QP without the inertia test);
//   tables: hess_to_P[nnz_hess], diag_P[nx] (where the Hessian and the regularization go in P: triu(H) plus the full
//     diagonal), jac_to_A[nnz_jac], eye_to_A[nx] (A = [dg/dx; I]), jac_to_Ae[nnz_jac], eye_to_Ae[nx], slack_to_Ae[4 ng]
//     (the elastic QP's A: [dg/dx, I, -I; I, 0, 0; 0, I]), hess_p/hess_i and jac_p/jac_i (the CSC patterns of the
//     Hessian's upper triangle and of dg/dx), hard_rows[ng + nx] (1: a row of g, or a bound on x, that the elastic QP
//     keeps hard);
//   types: Workspace (members v: a Vectors of these sizes; qp and, unless elastic_in_qp, elastic: the QP backends'
//     workspaces), QP and Elastic (two QP backends: the QPs of the iteration, and the elastic QP, without elastic_rows
//     over the variables [d; v; w] with v, w >= 0 the slacks of the constraint rows, penalized linearly; Elastic is QP
//     when elastic_in_qp);
//   evaluations: double cost(x, p, ws); void constraints(x, p, g, ws); void gradient(x, p, grad, ws);
//     void jacobian(x, p, jac, ws); void hessian(x, p, lam_g, hess, ws) (the upper triangle of the Hessian of
//     f + lam_g'g).
#ifndef ANVIL_SQP_HPP
#define ANVIL_SQP_HPP
#include <cmath>
#include <cstdio>
#include <limits>

#include "anvil/line_search.hpp"
#include "anvil/qp.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace sqp {

/// How a solve ended (call(), rti_feedback()).
enum Status : int {
  converged = 0,
  max_iterations = 1,
  infeasible = 2,
  numerical_error = 3,
  acceptable = 4,
  time_limit = 5
};

/// Call-time limits of a solve (the generated call() takes the build-time options as defaults).
struct Limits {
  int max_iter;     ///< at most the build-time max_iter (the size of the history)
  double tol;       ///< the convergence tolerance
  double max_time;  ///< seconds; past it the solve ends with time_limit (its QPs stop there too; never without a clock)
  bool restore = true;         ///< false: the solve ends max_iterations where its restoration phase would begin
  bool restore_first = false;  ///< begin in the restoration phase where x0 violates the constraints
  /// x0 is the previous call's solution shifted by one stage (a receding horizon's guess): the first QP starts warm
  /// from the previous call's last QP solution, shifted alike (QP::shift)
  bool shifted = false;
  /// lam_g0 is unknown (zeros): at x0 the equality rows' multipliers are estimated first (estimate_multipliers())
  bool estimate_multipliers = false;
};
/// Functions whose output is checked for NaN/inf (Stats::failed_function).
enum Evaluated : int {
  none = -1,
  cost = 0,
  cost_gradient = 1,
  constraints = 2,
  constraint_jacobian = 3,
  lagrangian_hessian = 4
};

/// Per-iteration history (entry k is iteration k; iterations + 1 entries are filled; in the solver's type T) and
/// diagnostics.
template <int max_iter, class T = double>
struct Stats {
  int iterations = 0;
  int status = numerical_error;
  int failed_function = none;  ///< which function produced a NaN/inf, or none
  int failed_index = -1;       ///< and at which output entry
  int worst_constraint = -1;   ///< most violated constraint at the end: 0..ng-1 for g, ng.. for bounds on x
  double worst_violation = 0.0;
  double worst_value = 0.0;  ///< the value of the most violated constraint (g[i] or x[j])
  // NOTE: the times are anvil::now()'s: all 0 where the target compiles timing out (ANVIL_NO_CLOCK)
  double time_evaluation = 0.0;   ///< seconds evaluating f, the gradient, g, dg/dx and the Hessian (line search excluded)
  double time_qp_update = 0.0;    ///< seconds loading the QPs' matrices (OSQP refactors its KKT matrix here)
  double time_qp_solve = 0.0;     ///< seconds in the QP solver's iterations
  double time_line_search = 0.0;  ///< seconds evaluating trial points
  T objective[max_iter + 1] = {};
  T primal_infeasibility[max_iter + 1] = {};
  T dual_infeasibility[max_iter + 1] = {};
  T complementarity[max_iter + 1] = {};
  T step[max_iter + 1] = {};
  T regularization[max_iter + 1] = {};
  int qp_iterations[max_iter + 1] = {};
  int qp_status[max_iter + 1] = {};     ///< anvil::qp::Status of the QP solved at each iteration
  bool restoration[max_iter + 1] = {};  ///< the iteration is a feasibility restoration step
};

/// The vectors the loop works on (in place: part of the workspace).
template <class P>
struct Vectors {
  using real = typename P::real;
  static constexpr int nA = P::ng + P::nx;
  anvil::Array<real, P::nx> grad, trial;
  anvil::Array<real, P::ng> g, g_trial;
  anvil::Array<real, P::nnz_jac> jac;
  anvil::Array<real, P::nnz_hess> hess;
  // P and A (none where the QP backend loads from hess and jac: P::direct_load)
  anvil::Array<real, P::direct_load ? 0 : P::nnz_P> Px;
  anvil::Array<real, P::direct_load ? 0 : P::nnz_A> Ax;
  anvil::Array<real, nA> l, u;
  // the slack form of the elastic QP (none where the QP's own rows turn elastic: P::elastic_rows)
  anvil::Array<real, P::elastic_rows ? 0 : P::nnz_Ae> Axe;
  anvil::Array<real, P::elastic_rows ? 0 : P::nx + 2 * P::ng> qe;
  anvil::Array<real, P::elastic_rows ? 0 : nA + 2 * P::ng> le, ue;
  anvil::Array<real, 2 * (P::max_iter + 1)> filter_theta, filter_phi;  ///< the two phases' filters' entries
  bool rti_prepared = false;       ///< a real-time iteration's QP is prepared
  bool rti_warm = false;           ///< its solve starts warm (from the previous one's solution, shifted)
  int rti_failure[2] = {-1, -1};   ///< the function and output that made the preparation fail
  double rti_times[2] = {0, 0};    ///< the preparation's evaluation and QP update times
  real rti_regularization = 0.0;
};

template <class P>
class Solver {
 public:
  using real = typename P::real;  ///< the scalar type the loop computes in (double, or float)
  using WS = typename P::Workspace;
  using QP = typename P::QP;
  using Elastic = typename P::Elastic;
  using StatsT = Stats<P::max_iter, real>;
  static_assert(anvil::qp::implements_contract<QP>() && anvil::qp::implements_contract<Elastic>());
  static constexpr int nx = P::nx, ng = P::ng, nA = ng + nx, max_iter = P::max_iter;
  /// The tightest tolerance the arithmetic meets: none in double; in float, about 1e3 roundings of quantities of order
  /// one (a tol asked below it is raised to it, and acceptable_tol to 10x it)
  static constexpr double tol_floor = anvil::by_precision<real>(0.0, 1e-4f);
  static constexpr double acceptable_tol = P::acceptable_tol > 10 * tol_floor ? P::acceptable_tol : 10 * tol_floor;

  /// Solves from x0 (and multipliers lam_g0, lam_x0, zeros for a cold start) within the limits; writes x, f, lam_g,
  /// lam_x, stats. Each iteration linearizes (linearize), tests for termination (terminates), then takes a step of
  /// the optimality phase (optimality_step) or, where its QP is inconsistent or no step is acceptable, of the
  /// restoration phase (restoration_step).
  static int call(const real* x0, const real* p, const real* lbx, const real* ubx, const real* lbg,
                  const real* ubg, const real* lam_g0, const real* lam_x0, real* x, real* f, real* lam_g,
                  real* lam_x, StatsT& stats, WS& ws, Limits limits) {
    const double start = anvil::now();
    limits.max_iter = limits.max_iter < 0 ? 0 : limits.max_iter > max_iter ? max_iter : limits.max_iter;
    const real tol = static_cast<real>(std::fmax(limits.tol, tol_floor));
    stats = StatsT{};
    // NOTE: no QP of this solve starts warm from an earlier call's (its result would depend on what ran before), unless
    // the caller shifted that call's solution into x0 (a receding horizon, whose result depends on it anyway)
    restart_qp(limits.shifted, ws);
    if constexpr (!P::elastic_in_qp) Elastic::reset(ws.elastic);
    // NOTE: the time limit reaches into the QPs: one that runs past it stops there (the solve then ends time_limit)
    const double deadline = std::isfinite(limits.max_time) && limits.max_time > 0.0 ? start + limits.max_time : 0.0;
    set_deadline(deadline, ws);
    // NOTE: x0 is moved into its bounds (as IPOPT does): a QP step keeps x + d within them, but a shortened one from
    // outside would leave them violated, and their multipliers then grow without bound
    for (int i = 0; i < nx; ++i) {
      x[i] = std::fmin(std::fmax(x0[i], lbx[i]), ubx[i]);
      lam_x[i] = lam_x0[i];
    }
    for (int i = 0; i < ng; ++i) lam_g[i] = lam_g0[i];
    Iterate it{p, lbx, ubx, lbg, ubg, x, lam_g, lam_x, stats, ws, limits, tol, start, deadline, start, Search{ws}};
    it.fx = P::cost(x, p, ws);
    P::constraints(x, p, ws.v.g.data(), ws);
    for (;; ++it.k) {
      Residuals kkt;
      if (!linearize(it, kkt) || terminates(it, kkt)) break;
      if (it.k == 0) it.search.optimality.start(kkt.l1);
      if (!prepare_qps(it)) break;
      // NOTE: from the least-violation point of an infeasible solve (restore_first) the restoration begins at once: it
      // spares the QP that would be inconsistent again (OSQP spent milliseconds telling so)
      const bool restore_now = it.k == 0 && limits.restore_first && kkt.primal > tol;
      if (!it.restoration) {
        if (!restore_now) {
          const Next next = optimality_step(it, kkt);
          if (next == Next::iterate) continue;
          if (next == Next::stop || !limits.restore) break;
        }
        it.restoration = true;
        stats.restoration[it.k] = true;
        it.search.enter_restoration(kkt, it.fx, lam_g);
      }
      if (restoration_step(it, kkt) == Next::stop) break;
    }
    stats.time_evaluation += lap(it.clock);
    set_deadline(0.0, ws);  // NOTE: QPs solved outside a solve (a real-time iteration's) have none
    finish(x, ws.v.g.data(), lbx, ubx, lbg, ubg, it.k, it.status, stats);
    *f = it.fx;
    return it.status;
  }

  /// Real-time iteration, preparation phase: at the linearization point (x, lam_g) with parameter p, evaluate dg/dx
  /// and the Lagrangian Hessian, regularize it (screened on the equality rows of the expected bounds and the rows
  /// active in the previous QP, unless P::convex_hessian) and load the QP's matrices. Returns converged when prepared,
  /// else numerical_error (a NaN/inf, reported by the next rti_feedback()). `shifted`: x is the previous iteration's
  /// result shifted by one stage, and the QP starts warm from the previous QP's solution shifted alike (QP::shift).
  static int rti_prepare(const real* x, const real* p, const real* lam_g, const real* lbx, const real* ubx,
                         const real* lbg, const real* ubg, WS& ws, bool shifted = false) {
    auto& v = ws.v;
    double clock = anvil::now();
    v.rti_prepared = false;
    v.rti_failure[0] = v.rti_failure[1] = -1;
    const int bad_jacobian = evaluate_jacobian(x, p, ws);
    const int bad_hessian = bad_jacobian >= 0 ? -1 : evaluate_hessian(x, p, lam_g, ws);
    if (bad_jacobian >= 0 || bad_hessian >= 0) {
      v.rti_failure[0] = bad_jacobian >= 0 ? constraint_jacobian : lagrangian_hessian;
      v.rti_failure[1] = bad_jacobian >= 0 ? bad_jacobian : bad_hessian;
      return numerical_error;
    }
    v.rti_times[0] = lap(clock);
    assemble_A(ws);
    // the equality rows (and the rows active in the previous QP) decide the regularization, as in call()
    for (int i = 0; i < ng; ++i) {
      v.l[i] = lbg[i];
      v.u[i] = ubg[i];
    }
    for (int j = 0; j < nx; ++j) {
      v.l[ng + j] = lbx[j];
      v.u[ng + j] = ubx[j];
    }
    real reg = 0.0;
    for (;;) {
      const int loaded = load<QP>(reg, !P::convex_hessian, ws.qp, ws);
      if (loaded == anvil::qp::solved) break;
      if (loaded != anvil::qp::nonconvex) return numerical_error;
      reg = reg > real(0) ? reg * real(10) : P::reg_min;
      if (reg > P::reg_max) return numerical_error;
    }
    restart_qp(shifted, ws);
    v.rti_warm = shifted;
    v.rti_times[1] = lap(clock);
    v.rti_prepared = true;
    v.rti_regularization = reg;
    return converged;
  }

  /// Real-time iteration, feedback phase: with the (new) parameter p and bounds, evaluate f, the gradient and g at x,
  /// solve the prepared QP and take the full step; x, lam_g and lam_x are updated in place. Returns converged when x
  /// already meets the tolerance tol (as call() at its first iterate: no QP, no step, 0 iterations), max_iterations after
  /// a step, infeasible (the QP was inconsistent: the step of the elastic QP was taken) or numerical_error (no step).
  static int rti_feedback(const real* p, const real* lbx, const real* ubx, const real* lbg, const real* ubg,
                          real* x, real* f, real* lam_g, real* lam_x, StatsT& stats, WS& ws, double tol = P::tol) {
    auto& v = ws.v;
    stats = StatsT{};
    stats.time_evaluation = v.rti_times[0];
    stats.time_qp_update = v.rti_times[1];
    real* g = v.g.data();
    double clock = anvil::now();
    if (!v.rti_prepared) {
      record_failure(stats, v.rti_failure[0], v.rti_failure[1]);
      P::constraints(x, p, g, ws);
      finish(x, g, lbx, ubx, lbg, ubg, 0, numerical_error, stats);
      return numerical_error;
    }
    v.rti_prepared = false;
    real fx = P::cost(x, p, ws);
    P::constraints(x, p, g, ws);
    record_failure(stats, cost, std::isfinite(fx) ? -1 : 0);
    record_failure(stats, cost_gradient, evaluate_gradient(x, p, ws));
    record_failure(stats, constraints, first_nonfinite(g, ng));
    int status = max_iterations;
    if (stats.failed_function == none) {
      const Residuals kkt = residuals(x, g, lbx, ubx, lbg, ubg, lam_g, lam_x, ws);
      stats.objective[0] = fx;
      stats.primal_infeasibility[0] = kkt.primal;
      stats.dual_infeasibility[0] = kkt.dual;
      stats.complementarity[0] = kkt.complementarity;
      stats.regularization[0] = v.rti_regularization;
      stats.time_evaluation += lap(clock);
      if (meets(kkt, std::fmax(real(tol), real(tol_floor)))) {
        // NOTE: the linearization point is already a solution for the new parameter (a plant that followed the
        // prediction): its QP step would be below the tolerance; the QP kept for the next warm start is the last one
        finish(x, g, lbx, ubx, lbg, ubg, 0, converged, stats);
        *f = fx;
        return converged;
      }
      // *** feedback: the prepared QP with the new vectors, solved; the full step ***
      assemble_bounds(x, g, lbx, ubx, lbg, ubg, ws);
      const int qp_status =
          QP::solve(v.grad.data(), v.l.data(), v.u.data(), real(1e-2) * std::fmax(kkt.primal, kkt.dual), v.rti_warm,
                    ws.qp);
      stats.time_qp_solve += lap(clock);
      stats.qp_status[0] = qp_status;
      stats.qp_iterations[0] = QP::iterations(ws.qp);
      const real* d = QP::primal(ws.qp);
      const real* y = QP::dual(ws.qp);
      if (qp_status != anvil::qp::solved) {
        // NOTE: an inconsistent (or failed) QP: the elastic QP's step instead, its L1 penalty heavy enough to reduce
        // the violation as far as the linearization allows; the iteration reports infeasible, with the step taken
        real reg = v.rti_regularization;
        const int elastic_status = solve_elastic(v.grad.data(), penalty_weight(lam_g, kkt), reg, stats, clock, ws);
        stats.qp_status[0] = elastic_status;
        stats.qp_iterations[0] = elastic_iterations(ws);
        stats.restoration[0] = true;
        d = elastic_primal(ws);
        y = elastic_dual(ws);
        status = elastic_status == anvil::qp::solved ? infeasible : numerical_error;
      }
      if (status != numerical_error) {
        for (int j = 0; j < nx; ++j) x[j] += d[j];
        for (int i = 0; i < ng; ++i) lam_g[i] = y[i];
        for (int j = 0; j < nx; ++j) lam_x[j] = y[ng + j];
        stats.step[0] = 1.0;
        fx = P::cost(x, p, ws);
        P::constraints(x, p, g, ws);
        real l1 = 0.0;
        int worst = -1;
        stats.objective[1] = fx;
        stats.primal_infeasibility[1] = violation(x, g, lbx, ubx, lbg, ubg, &l1, &worst);
        stats.dual_infeasibility[1] = stats.complementarity[1] = NAN;  // needs the next preparation's derivatives
        stats.time_evaluation += lap(clock);
      }
    } else {
      status = numerical_error;
    }
    finish(x, g, lbx, ubx, lbg, ubg, status == numerical_error ? 0 : 1, status, stats);
    *f = fx;
    return status;
  }

 private:
  /// The QPs of a new solve start cold, or (`shifted`: the guess is the previous solution moved one stage) warm from
  /// the previous solve's last QP solution moved alike.
  static void restart_qp(bool shifted, WS& ws) {
    if (shifted)
      QP::shift(ws.qp);
    else
      QP::reset(ws.qp);
  }

  using Residuals = anvil::sqp::Residuals<real>;

  static constexpr real restoration_stationarity = real(1e-6);  ///< predicted/actual penalty where restoration stops

  using Search = LineSearch<P>;
  friend struct LineSearch<P>;

  /// One call's data and the state its iterations carry (the phases of call() read and advance it).
  struct Iterate {
    const real* p;
    const real *lbx, *ubx, *lbg, *ubg;
    real *x, *lam_g, *lam_x;
    StatsT& stats;
    WS& ws;
    const Limits limits;
    const real tol;
    const double start, deadline;
    double clock;
    Search search;
    real fx = 0.0, reg = 0.0;
    int status = max_iterations, k = 0, acceptable_streak = 0, line_search_failures = 0;
    bool restoration = false, zero_multipliers = false, acceptable_now = false;
  };
  /// What follows a phase's step: the next iteration, the end of the solve, or the restoration phase.
  enum class Next { iterate, stop, restore };

  /// The derivatives at the iterate, checked for NaN/inf (false: numerical_error), and its KKT residuals, recorded in
  /// the history.
  static bool linearize(Iterate& it, Residuals& kkt) {
    StatsT& stats = it.stats;
    const real* g = it.ws.v.g.data();
    record_failure(stats, cost, std::isfinite(it.fx) ? -1 : 0);
    record_failure(stats, cost_gradient, evaluate_gradient(it.x, it.p, it.ws));
    record_failure(stats, constraints, first_nonfinite(g, ng));
    record_failure(stats, constraint_jacobian, evaluate_jacobian(it.x, it.p, it.ws));
    if (stats.failed_function != none) {
      it.status = numerical_error;
      return false;
    }
    if (it.k == 0 && it.limits.estimate_multipliers)
      estimate_multipliers(it.x, g, it.lbx, it.ubx, it.lbg, it.ubg, it.lam_g, it.ws);
    kkt = residuals(it.x, g, it.lbx, it.ubx, it.lbg, it.ubg, it.lam_g, it.lam_x, it.ws);
    stats.time_evaluation += lap(it.clock);
    const int k = it.k;
    stats.objective[k] = it.fx;
    stats.primal_infeasibility[k] = kkt.primal;
    stats.dual_infeasibility[k] = kkt.dual;
    stats.complementarity[k] = kkt.complementarity;
    stats.regularization[k] = it.reg;
    stats.restoration[k] = it.restoration;
    if (P::verbose)
      std::printf("%s %4d%s f %+.10e  pr %.3e  du %.3e  co %.3e  reg %.1e\n", P::name, k, it.restoration ? "r" : " ",
                  it.fx, kkt.primal, kkt.dual, kkt.complementarity, it.reg);
    return true;
  }

  /// Whether the solve ends here (converged, acceptable, or a limit reached; the status set).
  static bool terminates(Iterate& it, const Residuals& kkt) {
    if (meets(kkt, it.tol)) {
      it.status = converged;
      return true;
    }
    it.acceptable_streak = meets(kkt, real(acceptable_tol)) ? it.acceptable_streak + 1 : 0;
    it.acceptable_now = it.acceptable_streak > 0;
    if (it.acceptable_streak >= P::acceptable_iter) {
      it.status = acceptable;
      return true;
    }
    if (it.k >= it.limits.max_iter || anvil::now() - it.start >= it.limits.max_time) {
      it.status = it.acceptable_now ? acceptable : it.k >= it.limits.max_iter ? max_iterations : time_limit;
      return true;
    }
    return false;
  }

  /// The Hessian at (x, lam_g) and the linearization, for the QPs of either phase (false: NaN/inf in the Hessian).
  static bool prepare_qps(Iterate& it) {
    if (int bad = evaluate_hessian(it.x, it.p, it.lam_g, it.ws); bad >= 0) {
      record_failure(it.stats, lagrangian_hessian, bad);
      it.status = numerical_error;
      return false;
    }
    it.stats.time_evaluation += lap(it.clock);
    assemble_A(it.ws);
    assemble_bounds(it.x, it.ws.v.g.data(), it.lbx, it.ubx, it.lbg, it.ubg, it.ws);
    return true;
  }

  /// The solve ends at the deadline (no line search past it either: a restoration's took 0.2 ms).
  static bool expired(Iterate& it) {
    if (!anvil::expired(it.deadline)) return false;
    it.status = it.acceptable_now ? acceptable : time_limit;
    return true;
  }

  /// Optimality phase: the QP, then the filter line search; Next::restore where the QP is inconsistent (or failed)
  /// or no step was acceptable.
  static Next optimality_step(Iterate& it, const Residuals& kkt) {
    StatsT& stats = it.stats;
    const int k = it.k;
    it.reg = it.reg > real(0) ? std::fmax(it.reg * real(0.1), P::reg_min) : real(0);
    if (it.line_search_failures > 0) it.reg = std::fmax(it.reg, real(1e-4) * kkt.gradient_scale);
    // NOTE: QPs far from the solution need not be solved to the final accuracy (qp_tolerance). A nonconvex or failed
    // QP is retried with more regularization (x10), only as much as needed; later QPs of one solve start from the
    // previous QP's solution (the first from an earlier call's only when shifted).
    const real qp_tol = qp_tolerance(std::fmax(kkt.primal, kkt.dual), it.tol);
    const int qp_status = solve_regularized(qp_tol, k > 0 || it.limits.shifted, it.reg, stats, it.clock, it.ws);
    stats.qp_status[k] = qp_status;
    stats.qp_iterations[k] = QP::iterations(it.ws.qp);
    if (expired(it)) return Next::stop;
    const real* d = QP::primal(it.ws.qp);
    const real* y = QP::dual(it.ws.qp);
    stats.regularization[k] = it.reg;
    // NOTE: inconsistent linearized constraints (or a failed QP): restoration
    if (qp_status != anvil::qp::solved) return Next::restore;
    it.search.rho = 0.0;  // the next price follows these multipliers
    // NOTE: corrections only after a shortened step: far from a solution, a corrected full step can leave the basin
    // the line search keeps to (the swing-up's first step reached a local optimum of 385, not 173)
    const bool correct = k > 0 && stats.step[k - 1] < real(1);
    const real alpha = it.search.optimality_step(it.x, it.p, it.lbx, it.ubx, it.lbg, it.ubg, it.fx, kkt.l1, d,
                                                 correct, qp_tol, it.ws);
    stats.step[k] = alpha;
    stats.time_line_search += lap(it.clock);
    if (alpha > real(0)) {
      it.line_search_failures = 0;
      take_step(it.search, alpha, y, it.x, &it.fx, it.lam_g, it.lam_x, it.ws);
      return Next::iterate;
    }
    // NOTE: no acceptable step: a point that meets acceptable_tol ends there (a stalled line search); a feasible one
    // is retried once with more regularization (shorter, steeper steps) and a fresh filter
    if (it.acceptable_now) {
      it.status = acceptable;
      return Next::stop;
    }
    if (kkt.primal > it.tol) return Next::restore;
    if (++it.line_search_failures > 1) {
      it.status = numerical_error;
      return Next::stop;
    }
    it.search.optimality.size = 0;
    return Next::iterate;
  }

  /// Restoration phase (elastic mode): the elastic NLP min f + rho (L1 violation of the elastic rows) s.t. the hard
  /// rows, by elastic QPs and a filter line search of its own (hard rows' L1 violation vs that penalty); back to the
  /// optimality phase once the violation is reduced enough and the point is acceptable to its filter.
  static Next restoration_step(Iterate& it, const Residuals& kkt) {
    StatsT& stats = it.stats;
    Search& search = it.search;
    auto& v = it.ws.v;
    const int k = it.k;
    real reg_r = search.prox;
    const int qp_status = solve_elastic(v.grad.data(), search.rho, reg_r, stats, it.clock, it.ws);
    stats.qp_status[k] = qp_status;
    stats.qp_iterations[k] = elastic_iterations(it.ws);
    if (expired(it)) return Next::stop;
    stats.regularization[k] = reg_r;
    if (qp_status == anvil::qp::nonconvex && !it.zero_multipliers) {
      // NOTE: the Hessian of the Lagrangian at multipliers that blew up may be indefinite beyond any regularization:
      // on with f's own Hessian
      it.zero_multipliers = true;
      forget_multipliers(it.lam_g, it.lam_x);
      return Next::iterate;
    }
    if (qp_status != anvil::qp::solved && qp_status != anvil::qp::max_iterations) {
      it.status = numerical_error;
      return Next::stop;
    }
    const real* d = elastic_primal(it.ws);
    const real* g = v.g.data();
    real slope = 0.0, step_hard = 0.0;
    for (int j = 0; j < nx; ++j) slope += v.grad[j] * d[j];
    const real step_l1 = linearized_violation(it.x, g, it.lbx, it.ubx, it.lbg, it.ubg, d, &step_hard, it.ws);
    // the decrease of the penalty its linearization promises (the hard rows are met by the step's linearization)
    const real predicted = search.rho * ((kkt.l1 - kkt.l1_hard) - (step_l1 - step_hard)) - slope;
    const real penalty = search.penalty(it.fx, kkt.l1, kkt.l1_hard);
    const bool stationary = kkt.l1_hard <= it.tol &&
                            !(predicted > restoration_stationarity * std::fmax(real(1), std::fabs(penalty)));
    const real alpha = stationary ? real(0) : search.restoration_step(it.x, it.p, it.lbx, it.ubx, it.lbg, it.ubg, kkt,
                                                                    penalty, predicted, d, it.ws);
    stats.step[k] = alpha;
    if (P::verbose)
      std::printf("%s      restoration: step %.3e  penalty %+.10e  predicted %.3e  rho %.1e  reg %.1e  hard %.3e\n",
                  P::name, alpha, penalty, predicted, search.rho, reg_r, kkt.l1_hard);
    stats.time_line_search += lap(it.clock);
    if (alpha == real(0) && !stationary && reg_r * real(100) <= P::reg_max) {
      // NOTE: no step was acceptable although the model promised progress: shorter, more cautious steps
      search.prox = reg_r * real(100);
      return Next::iterate;
    }
    if (alpha == real(0)) {
      // a stationary point of the elastic NLP (or no step at the largest regularization): with violation left, the
      // constraints are locally infeasible, unless a higher price still buys less violation (f's share in the
      // penalty may keep x off the least-violation point: rho x10 until the violation stays put)
      if (kkt.primal > it.tol) {
        if (stationary && search.steer(kkt)) return Next::iterate;
        it.status = infeasible;
        return Next::stop;
      }
      it.restoration = false;
      forget_multipliers(it.lam_g, it.lam_x);
      return Next::iterate;
    }
    // NOTE: the next restoration QP starts from a tenth of the regularization this one needed (as in the optimality
    // phase): restarting from the least one, a nonconvex stretch cost up to 8 QP solves per iteration
    search.prox = std::fmax(Search::restoration_prox, reg_r * real(0.1));
    take_step(search, alpha, elastic_dual(it.ws), it.x, &it.fx, it.lam_g, it.lam_x, it.ws);
    if (search.restored(it.tol)) {
      // NOTE: the restoration's multipliers price the penalty (up to rho), not the NLP's constraints: the optimality
      // phase starts from zero multipliers (f's own Hessian), as its first QP then estimates them (with them kept, the
      // bicycle's cold starts crawled at regularization 1-10 x I for 50 iterations)
      it.restoration = false;
      forget_multipliers(it.lam_g, it.lam_x);
    }
    return Next::iterate;
  }

  /// Multipliers zeroed: the next Hessian is f's own, the next QP estimates them afresh.
  static void forget_multipliers(real* lam_g, real* lam_x) {
    for (int i = 0; i < ng; ++i) lam_g[i] = 0.0;
    for (int j = 0; j < nx; ++j) lam_x[j] = 0.0;
  }

  /// Whether the step d is negligible next to x: |d| <= 1e-11 max(1, |x|) (infinity norms).
  static bool is_tiny(const real* x, const real* d) {
    real dmax = 0.0, xmax = 1.0;
    for (int j = 0; j < nx; ++j) {
      dmax = anvil::running_max(dmax, std::fabs(d[j]));
      xmax = anvil::running_max(xmax, std::fabs(x[j]));
    }
    return dmax <= real(1e-11) * xmax;
  }

  /// Moves to the accepted trial point; with the QP's multipliers y (null in the restoration phase, whose multipliers
  /// are not the NLP's), lam_g and lam_x move toward them by alpha.
  static void take_step(const Search& search, real alpha, const real* y, real* x, real* fx, real* lam_g,
                        real* lam_x, WS& ws) {
    for (int j = 0; j < nx; ++j) x[j] = ws.v.trial[j];
    for (int i = 0; i < ng; ++i) ws.v.g[i] = ws.v.g_trial[i];
    *fx = search.f_trial;
    if (y == nullptr) return;
    for (int i = 0; i < ng; ++i) lam_g[i] += alpha * (y[i] - lam_g[i]);
    for (int j = 0; j < nx; ++j) lam_x[j] += alpha * (y[ng + j] - lam_x[j]);
  }

  /// The price of a unit of violation in an elastic QP: 100 x max(1, |lam_g|, |grad f|).
  static real penalty_weight(const real* lam_g, const Residuals& kkt) {
    real lam_max = 0.0;
    for (int i = 0; i < ng; ++i) lam_max = anvil::running_max(lam_max, std::fabs(lam_g[i]));
    return real(1e2) * std::fmax(real(1), std::fmax(lam_max, kkt.gradient_scale));
  }

  /// out += J d, J the constraints' Jacobian at the iterate (ws.v.jac, CSC).
  static void add_jacobian_product(const real* d, real* out, const WS& ws) {
    for (int j = 0; j < nx; ++j)
      for (int e = P::jac_p[j]; e < P::jac_p[j + 1]; ++e) out[P::jac_i[e]] += ws.v.jac[e] * d[j];
  }

  /// The L1 violation of the linearization at x along d: g + J d against [lbg, ubg], x + d against [lbx, ubx] (and its
  /// share on the hard rows into l1_hard).
  static real linearized_violation(const real* x, const real* g, const real* lbx, const real* ubx,
                                     const real* lbg, const real* ubg, const real* d, real* l1_hard, WS& ws) {
    real* gd = ws.v.g_trial.data();
    real* xd = ws.v.trial.data();
    for (int i = 0; i < ng; ++i) gd[i] = g[i];
    for (int j = 0; j < nx; ++j) xd[j] = x[j] + d[j];
    add_jacobian_product(d, gd, ws);
    real l1 = 0.0;
    int worst = -1;
    violation(xd, gd, lbx, ubx, lbg, ubg, &l1, &worst, l1_hard);
    return l1;
  }

  /// Seconds since `start`, and restarts it.
  static double lap(double& start) {
    const double now = anvil::now();
    const double seconds = now - start;
    start = now;
    return seconds;
  }

  /// Index of the first non-finite entry, or -1.
  static int first_nonfinite(const real* v, int n) {
    // NOTE: v - v is 0 for a finite entry and NaN for a NaN/inf, so the sum of eight such accumulators (vector lanes,
    // no branch per entry) is 0 exactly when every entry is finite; only then a non-finite one is looked for
    real lanes[8] = {};
    int i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) lanes[j] += v[i + j] - v[i + j];
    real sum = 0;
    for (int j = 0; j < 8; ++j) sum += lanes[j];
    for (; i < n; ++i) sum += v[i] - v[i];
    if (sum == real(0)) return -1;
    for (i = 0; i < n; ++i)
      if (!std::isfinite(v[i])) return i;
    return -1;
  }

  /// Records a NaN/inf produced by `which` at output `index` (the first one found wins).
  static void record_failure(StatsT& stats, int which, int index) {
    if (index >= 0 && stats.failed_function == none) {
      stats.failed_function = which;
      stats.failed_index = index;
    }
  }

  /// The gradient at (x, p) into v.grad; the index of its first NaN/inf, or -1.
  static int evaluate_gradient(const real* x, const real* p, WS& ws) {
    P::gradient(x, p, ws.v.grad.data(), ws);
    return first_nonfinite(ws.v.grad.data(), nx);
  }

  /// dg/dx at (x, p) into v.jac; the index of its first NaN/inf, or -1.
  static int evaluate_jacobian(const real* x, const real* p, WS& ws) {
    P::jacobian(x, p, ws.v.jac.data(), ws);
    return first_nonfinite(ws.v.jac.data(), P::nnz_jac);
  }

  /// The upper-triangular Hessian of f + lam'g at (x, p) into v.hess; the index of its first NaN/inf, or -1.
  static int evaluate_hessian(const real* x, const real* p, const real* lam_g, WS& ws) {
    P::hessian(x, p, lam_g, ws.v.hess.data(), ws);
    return first_nonfinite(ws.v.hess.data(), P::nnz_hess);
  }

  /// Max violation (primal infeasibility) and its index, and the L1 violation the filter measures (and, unless null,
  /// its share on the rows the elastic QPs keep hard, P::hard_rows).
  static real violation(const real* x, const real* g, const real* lbx, const real* ubx, const real* lbg,
                          const real* ubg, real* l1, int* worst, real* l1_hard = nullptr) {
    real vmax = 0.0, sum = 0.0, hard = 0.0;
    *worst = -1;
    for (int i = 0; i < nA; ++i) {
      const real value = i < ng ? g[i] : x[i - ng];
      const real lo = i < ng ? lbg[i] : lbx[i - ng], hi = i < ng ? ubg[i] : ubx[i - ng];
      const real excess = value < lo ? lo - value : (value > hi ? value - hi : real(0));
      sum += excess;
      if (P::hard_rows[i]) hard += excess;
      if (excess > vmax) {
        vmax = excess;
        *worst = i;
      }
    }
    *l1 = sum;
    if (l1_hard != nullptr) *l1_hard = hard;
    return vmax;
  }

  /// Complementarity: the largest |multiplier| x (distance to the bound its sign points at); a multiplier pointing at
  /// a bound that does not exist (±inf) counts as infinitely far.
  static real complementarity(const real* x, const real* g, const real* lbx, const real* ubx,
                                const real* lbg, const real* ubg, const real* lam_x, const real* lam_g) {
    real worst = 0.0;
    for (int i = 0; i < nA; ++i) {
      const real lam = i < ng ? lam_g[i] : lam_x[i - ng], value = i < ng ? g[i] : x[i - ng];
      const real lo = i < ng ? lbg[i] : lbx[i - ng], hi = i < ng ? ubg[i] : ubx[i - ng];
      if (lam == real(0)) continue;
      const real distance = lam > real(0) ? hi - value : value - lo;
      worst = anvil::running_max(worst, std::isfinite(distance) ? std::fabs(lam * distance) : real(HUGE_VAL));
    }
    return worst;
  }

  static Residuals residuals(const real* x, const real* g, const real* lbx, const real* ubx,
                             const real* lbg, const real* ubg, const real* lam_g, const real* lam_x, WS& ws) {
    Residuals r;
    const real* grad = ws.v.grad.data();
    const real* jac = ws.v.jac.data();
    for (int j = 0; j < nx; ++j) {  // the Lagrangian's gradient, a column of the Jacobian at a time
      real stationarity = grad[j] + lam_x[j];
      for (int e = P::jac_p[j]; e < P::jac_p[j + 1]; ++e) stationarity += jac[e] * lam_g[P::jac_i[e]];
      r.gradient_scale = anvil::running_max(r.gradient_scale, std::fabs(grad[j]));
      r.dual = anvil::running_max(r.dual, std::fabs(stationarity));
    }
    r.primal = violation(x, g, lbx, ubx, lbg, ubg, &r.l1, &r.worst, &r.l1_hard);
    r.complementarity = complementarity(x, g, lbx, ubx, lbg, ubg, lam_x, lam_g);
    return r;
  }

  /// The accuracy the QP of an iterate with KKT error e asks for: e min(1e-2, e), at least tol / 10. An inexact Newton
  /// step with a quadratic forcing term: loose QPs far from the solution, and near it a QP error of about e^2, below
  /// the next iterate's own, so the SQP keeps its rate (a fixed 1e-2 e left the next iterate at 1e-2 e: an extra
  /// iteration wherever that exceeded tol, a third of the chain MPC's iterations at nx = 21).
  static real qp_tolerance(real kkt_error, real tol) {
    return std::fmax(kkt_error * std::fmin(real(1e-2), kkt_error), real(0.1) * tol);
  }

  /// The KKT residuals are within tol (dual infeasibility and complementarity relative to max(1, |grad f|)).
  static bool meets(const Residuals& r, real tol) {
    return r.primal <= tol && r.dual <= tol * r.gradient_scale && r.complementarity <= tol * r.gradient_scale;
  }

  /// d'(H + reg I)d - 1e-8 |d|^2 for the upper-triangular Hessian values `hess`.
  static real curvature(const real* hess, const real* d, real reg) {
    real c = 0.0, norm = 0.0;
    for (int j = 0; j < nx; ++j) {
      norm += d[j] * d[j];
      for (int e = P::hess_p[j]; e < P::hess_p[j + 1]; ++e) {
        const int i = P::hess_i[e];
        c += (i == j ? real(1) : real(2)) * hess[e] * d[i] * d[j];
      }
    }
    return c + (reg - real(1e-8)) * norm;
  }

  /// The QP's constraint matrix A = [dg/dx; I] from v.jac (none to assemble where the backend loads from jac).
  static void assemble_A(WS& ws) {
    if constexpr (!P::direct_load) {
      for (int e = 0; e < P::nnz_jac; ++e) ws.v.Ax[P::jac_to_A[e]] = ws.v.jac[e];
      for (int j = 0; j < nx; ++j) ws.v.Ax[P::eye_to_A[j]] = 1.0;
    }
  }

  /// Loads the QP with P = triu(H) + reg I and A = [dg/dx; I] into backend B's workspace qp: from v.hess and v.jac
  /// themselves where the backend takes them (P::direct_load), else through v.Px and v.Ax.
  template <class B>
  static int load(real reg, bool screen, typename B::Workspace& qp, WS& ws) {
    auto& v = ws.v;
    if constexpr (P::direct_load) {
      return B::load_derivatives(v.hess.data(), reg, v.jac.data(), v.l.data(), v.u.data(), screen, qp);
    } else {
      assemble_P(reg, ws);
      return B::load(v.Px.data(), v.Ax.data(), v.l.data(), v.u.data(), screen, qp);
    }
  }

  /// The QP's P = triu(H) + reg I from v.hess.
  static void assemble_P(real reg, WS& ws) {
    for (int e = 0; e < P::nnz_P; ++e) ws.v.Px[e] = 0.0;
    for (int e = 0; e < P::nnz_hess; ++e) ws.v.Px[P::hess_to_P[e]] = ws.v.hess[e];
    for (int j = 0; j < nx; ++j) ws.v.Px[P::diag_P[j]] += reg;
  }

  /// The QP's bounds: lbg - g <= J d <= ubg - g, lbx - x <= d <= ubx - x.
  static void assemble_bounds(const real* x, const real* g, const real* lbx, const real* ubx,
                              const real* lbg, const real* ubg, WS& ws) {
    real* l = ws.v.l.data();
    real* u = ws.v.u.data();
    for (int i = 0; i < ng; ++i) {
      l[i] = lbg[i] - g[i];
      u[i] = ubg[i] - g[i];
    }
    for (int j = 0; j < nx; ++j) {
      l[ng + j] = lbx[j] - x[j];
      u[ng + j] = ubx[j] - x[j];
    }
  }

  /// The QP with the least regularization (0, or a tenth of the last one, x10 per retry) that is solved along a
  /// direction of nonnegative curvature; infeasible as soon as it is infeasible with regularization; nonconvex past
  /// reg_max. After a
  /// failed solve the next starts cold: a failed solve's iterate is no start for the next, more regularized QP (warm
  /// from it, ADMM was seen to stall at every regularization up to reg_max on the cart-pole swing-up).
  static int solve_regularized(real qp_tol, bool warm, real& reg, StatsT& stats, double& clock, WS& ws) {
    auto& v = ws.v;
    for (;;) {
      int status = load<QP>(reg, false, ws.qp, ws);
      stats.time_qp_update += lap(clock);
      if (status == anvil::qp::solved) {
        status = QP::solve(v.grad.data(), v.l.data(), v.u.data(), qp_tol, warm, ws.qp);
        warm = warm && status == anvil::qp::solved;
      }
      stats.time_qp_solve += lap(clock);
      // NOTE: an interior point cannot tell inconsistent rows from an unbounded QP (a Hessian singular along a
      // direction the rows leave open, as an LP's), whose iterates diverge alike: unregularized, the QP is solved
      // once more with regularization before it counts as infeasible
      if (status == anvil::qp::infeasible && reg > real(0)) return status;
      if (status == anvil::qp::max_iterations && anvil::expired(ws.qp.deadline)) return status;
      // NOTE: inertia-free curvature test: a step along which the regularized Hessian is not positive is no descent
      // direction, so it counts as nonconvex too
      if (status == anvil::qp::solved && curvature(v.hess.data(), QP::primal(ws.qp), reg) >= real(0)) return status;
      reg = reg > real(0) ? reg * real(10) : P::reg_min;
      if (reg > P::reg_max) return anvil::qp::nonconvex;
    }
  }

  /// Multipliers where the caller has none (IPOPT's least-squares start, constr_mult_init_max): the equality rows'
  /// are those of the QP with the identity for Hessian at x and the equalities alone (the inequality rows and the
  /// bounds not fixing a variable left out), min 1/2 d'd + grad'd s.t. the linearized equalities: the multipliers
  /// closest to stationarity. Kept where that QP is solved and none exceeds 1e3, else the zeros stay; inequality
  /// rows keep zero (an active set guessed with the identity for Hessian misled hs104's iterates). Zero multipliers
  /// leave the Lagrangian's Hessian the cost's alone: with a linear cost and nonlinear equalities (a hanging chain)
  /// the first QP is then an LP bounded only by the regularization, whose step the filter may still accept.
  static void estimate_multipliers(const real* x, const real* g, const real* lbx, const real* ubx, const real* lbg,
                                   const real* ubg, real* lam_g, WS& ws) {
    if constexpr (ng > 0) {
      auto& v = ws.v;
      const auto equality = [&](int i) { return i < ng ? lbg[i] == ubg[i] : lbx[i - ng] == ubx[i - ng]; };
      int equalities = 0;
      for (int i = 0; i < ng; ++i) equalities += equality(i);
      if (equalities == 0) return;
      for (int e = 0; e < P::nnz_hess; ++e) v.hess[e] = 0.0;
      assemble_A(ws);
      assemble_bounds(x, g, lbx, ubx, lbg, ubg, ws);
      for (int i = 0; i < nA; ++i)
        if (!equality(i)) {
          v.l[i] = -real(HUGE_VAL);
          v.u[i] = real(HUGE_VAL);
        }
      if (load<QP>(real(1), false, ws.qp, ws) != anvil::qp::solved) return;
      if (QP::solve(v.grad.data(), v.l.data(), v.u.data(), real(1e-6), false, ws.qp) != anvil::qp::solved) return;
      const real* y = QP::dual(ws.qp);
      real largest = 0.0;
      for (int i = 0; i < ng; ++i) largest = anvil::running_max(largest, std::fabs(y[i]));
      if (!(largest <= real(1e3))) return;
      for (int i = 0; i < ng; ++i)
        if (equality(i)) lam_g[i] = y[i];
    }
  }

  /// The elastic QP: min 1/2 d'(H + reg I)d + q'd + weight (the L1 violation of its elastic rows' linearization),
  /// regularized further (x10) while nonconvex. With elastic rows (P::elastic_rows: a Riccati interior point over the
  /// QP's patterns, whose stage rows and state bounds are elastic) the Elastic backend solves it with the QP's
  /// matrices; else with slacks v, w >= 0 on every constraint row (lbg - g <= J d + v - w <= ubg - g).
  static int solve_elastic(const real* q, real weight, real& reg, StatsT& stats, double& clock,
                           WS& ws) {
    auto& v = ws.v;
    real* qe = v.qe.data();
    real* le = v.le.data();
    real* ue = v.ue.data();
    real* Axe = v.Axe.data();
    if constexpr (!P::elastic_rows) {
      for (int j = 0; j < nx; ++j) qe[j] = q[j];
      for (int i = 0; i < 2 * ng; ++i) {
        qe[nx + i] = weight;
        le[nA + i] = 0.0;
        ue[nA + i] = real(HUGE_VAL);
      }
      for (int i = 0; i < nA; ++i) {
        le[i] = v.l[i];
        ue[i] = v.u[i];
      }
      for (int e = 0; e < P::nnz_jac; ++e) Axe[P::jac_to_Ae[e]] = v.jac[e];
      for (int j = 0; j < nx; ++j) Axe[P::eye_to_Ae[j]] = 1.0;
      for (int i = 0; i < ng; ++i) {
        Axe[P::slack_to_Ae[2 * i]] = 1.0;
        Axe[P::slack_to_Ae[2 * i + 1]] = 1.0;
        Axe[P::slack_to_Ae[2 * ng + 2 * i]] = -real(1);
        Axe[P::slack_to_Ae[2 * ng + 2 * i + 1]] = 1.0;
      }
      Elastic::reset(elastic_ws(ws));
    }
    for (;;) {
      int status;
      auto& e = elastic_ws(ws);
      if constexpr (P::elastic_rows) {
        status = load<Elastic>(reg, false, e, ws);
        stats.time_qp_update += lap(clock);
        if (status == anvil::qp::solved) {
          Elastic::set_elastic(weight, e);
          // NOTE: warm from this solve's last solved QP's iterate: started cold each time, the P2 cart-pole from xc = 3
          // (|xc| <= 2) crawled to a local least-violation point 2.7x worse (max_iterations); warm, it ends
          // infeasible at the global one in 41 iterations
          status = Elastic::solve(q, v.l.data(), v.u.data(), real(1e-8), true, e);
          if (status == anvil::qp::solved && curvature(v.hess.data(), Elastic::primal(e), reg) < real(0))
            status = anvil::qp::nonconvex;
        }
      } else {
        assemble_P(reg, ws);
        status = Elastic::load(v.Px.data(), Axe, le, ue, false, e);
        stats.time_qp_update += lap(clock);
        if (status == anvil::qp::solved) status = Elastic::solve(qe, le, ue, real(0), false, e);
      }
      stats.time_qp_solve += lap(clock);
      // NOTE: an elastic QP is feasible by construction: "infeasible" is its interior point's multipliers blowing up
      // (the bicycle's restart from 20 m/s), which more regularization tames as it does a nonconvex QP
      const bool retry = status == anvil::qp::nonconvex || status == anvil::qp::infeasible;
      if (!retry || reg * real(10) > P::reg_max || anvil::expired(e.deadline)) return status;
      reg = reg > real(0) ? reg * real(10) : P::reg_min;
    }
  }

  /// The deadline (anvil::now(); 0: none) of the QPs, the elastic ones' too.
  static void set_deadline(double deadline, WS& ws) {
    ws.qp.deadline = deadline;
    elastic_ws(ws).deadline = deadline;
  }

  /// The elastic QP backend's workspace (the QP's own when it solves the elastic QPs too).
  template <class W>
  static auto& elastic_ws(W& ws) {
    if constexpr (P::elastic_in_qp) return ws.qp;
    else return ws.elastic;
  }

  /// The elastic QP's step, multipliers (g's rows, then x's bounds) and iterations.
  static const real* elastic_primal(const WS& ws) { return Elastic::primal(elastic_ws(ws)); }
  static const real* elastic_dual(const WS& ws) { return Elastic::dual(elastic_ws(ws)); }
  static int elastic_iterations(const WS& ws) { return Elastic::iterations(elastic_ws(ws)); }

  /// Fills the end-of-solve diagnostics: the most violated constraint and its violation.
  static void finish(const real* x, const real* g, const real* lbx, const real* ubx, const real* lbg,
                     const real* ubg, int iterations, int status, StatsT& stats) {
    real l1 = 0.0;
    int worst = -1;
    violation(x, g, lbx, ubx, lbg, ubg, &l1, &worst);
    stats.worst_constraint = worst;
    stats.worst_value = worst < 0 ? real(0) : worst < ng ? g[worst] : x[worst - ng];
    stats.worst_violation =
        worst < 0 ? real(0)
        : worst < ng
            ? std::fmax(lbg[worst] - g[worst], g[worst] - ubg[worst])
            : std::fmax(lbx[worst - ng] - x[worst - ng], x[worst - ng] - ubx[worst - ng]);
    stats.iterations = iterations;
    stats.status = status;
  }
};

}  // namespace sqp
}  // namespace anvil
#endif  // ANVIL_SQP_HPP
