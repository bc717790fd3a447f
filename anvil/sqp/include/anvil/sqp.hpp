// anvil::sqp: the SQP loop of a generated NLP solver, min f(x, p) s.t. lbg <= g(x, p) <= ubg, lbx <= x <= ubx.
//
// Exact Hessian regularized only when a QP is nonconvex (a multiple of the identity, x10 per retry), a backtracking
// filter line search (objective vs L1 violation, Waechter and Biegler), an elastic QP when the linearized constraints
// are inconsistent, termination on primal and dual infeasibility and complementarity, NaN/inf diagnostics naming the
// function and output. Every QP goes through the QP contract (anvil/qp.hpp): the loop never sees how it is solved.
//
// The problem P (generated per NLP) provides:
//   sizes: nx, ng, max_iter, nnz_jac, nnz_hess, nnz_P, nnz_A, nnz_Ae;
//   settings: name (for verbose output), tol, reg_min, reg_max, armijo, backtrack, min_step, verbose;
//   tables: hess_to_P[nnz_hess], diag_P[nx] (where the Hessian and the regularization go in P: triu(H) plus the full
//     diagonal), jac_to_A[nnz_jac], eye_to_A[nx] (A = [dg/dx; I]), jac_to_Ae[nnz_jac], eye_to_Ae[nx], slack_to_Ae[4 ng]
//     (the elastic QP's A: [dg/dx, I, -I; I, 0, 0; 0, I]), hess_p/hess_i and jac_p/jac_i (the CSC patterns of the
//     Hessian's upper triangle and of dg/dx);
//   types: Workspace (members v: a Vectors of these sizes; qp and elastic: the QP backends' workspaces), QP and
//     Elastic (two QP backends: the QPs of the iteration, and the elastic QP, whose variables are [d; v; w] with
//     v, w >= 0 the slacks of the constraint rows, penalized linearly);
//   evaluations: double cost(x, p, ws); void constraints(x, p, g, ws); void gradient(x, p, grad, ws);
//     void jacobian(x, p, jac, ws); void hessian(x, p, lam_g, hess, ws) (the upper triangle of the Hessian of
//     f + lam_g'g).
#ifndef ANVIL_SQP_HPP
#define ANVIL_SQP_HPP
#include <chrono>
#include <cmath>
#include <cstdio>

#include "anvil/qp.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace sqp {

/// How a solve ended (call(), rti_feedback()).
enum Status : int { converged = 0, max_iterations = 1, infeasible = 2, numerical_error = 3 };
/// Functions whose output is checked for NaN/inf (Stats::failed_function).
enum Evaluated : int {
  none = -1,
  cost = 0,
  cost_gradient = 1,
  constraints = 2,
  constraint_jacobian = 3,
  lagrangian_hessian = 4
};

/// Per-iteration history (entry k is iteration k; iterations + 1 entries are filled) and diagnostics.
template <int max_iter>
struct Stats {
  int iterations = 0;
  int status = numerical_error;
  int failed_function = none;  ///< which function produced a NaN/inf, or none
  int failed_index = -1;       ///< and at which output entry
  int worst_constraint = -1;   ///< most violated constraint at the end: 0..ng-1 for g, ng.. for bounds on x
  double worst_violation = 0.0;
  double time_evaluation = 0.0;   ///< seconds evaluating f, the gradient, g, dg/dx and the Hessian (line search excluded)
  double time_qp_update = 0.0;    ///< seconds loading the QPs' matrices (OSQP refactors its KKT matrix here)
  double time_qp_solve = 0.0;     ///< seconds in the QP solver's iterations
  double time_line_search = 0.0;  ///< seconds evaluating trial points
  double objective[max_iter + 1] = {};
  double primal_infeasibility[max_iter + 1] = {};
  double dual_infeasibility[max_iter + 1] = {};
  double complementarity[max_iter + 1] = {};
  double step[max_iter + 1] = {};
  double regularization[max_iter + 1] = {};
  int qp_iterations[max_iter + 1] = {};
  int qp_status[max_iter + 1] = {};  ///< anvil::qp::Status of the QP solved at each iteration
};

/// Copies stats into flat arrays: history (max_iter + 1) x 6 doubles (objective, primal and dual infeasibility, step,
/// regularization, complementarity), ihistory (max_iter + 1) x 2 ints (QP iterations and status); info: iterations,
/// status, failed function, failed index, worst constraint; the worst violation; times: evaluation, QP update, QP
/// solve, line search.
template <int max_iter>
void export_stats(const Stats<max_iter>& stats, double* history, int* ihistory, int* info, double* worst_violation,
                  double* times) {
  for (int k = 0; k <= max_iter; ++k) {
    const double row[6] = {stats.objective[k], stats.primal_infeasibility[k], stats.dual_infeasibility[k],
                           stats.step[k],      stats.regularization[k],       stats.complementarity[k]};
    for (int c = 0; c < 6; ++c) history[6 * k + c] = row[c];
    ihistory[2 * k] = stats.qp_iterations[k];
    ihistory[2 * k + 1] = stats.qp_status[k];
  }
  const int values[5] = {stats.iterations, stats.status, stats.failed_function, stats.failed_index,
                         stats.worst_constraint};
  for (int c = 0; c < 5; ++c) info[c] = values[c];
  *worst_violation = stats.worst_violation;
  const double spent[4] = {stats.time_evaluation, stats.time_qp_update, stats.time_qp_solve, stats.time_line_search};
  for (int c = 0; c < 4; ++c) times[c] = spent[c];
}

/// The vectors the loop works on (allocated once, by the workspace's constructor).
template <class P>
struct Vectors {
  static constexpr int nA = P::ng + P::nx;
  anvil::Buffer<double, P::nx> grad, trial, d;
  anvil::Buffer<double, P::ng> g, g_trial;
  anvil::Buffer<double, P::nnz_jac> jac;
  anvil::Buffer<double, P::nnz_hess> hess;
  anvil::Buffer<double, P::nnz_P> Px;
  anvil::Buffer<double, P::nnz_A> Ax;
  anvil::Buffer<double, nA> l, u, lam_all;
  anvil::Buffer<double, P::nnz_Ae> Axe;
  anvil::Buffer<double, P::nx + 2 * P::ng> qe;
  anvil::Buffer<double, nA + 2 * P::ng> le, ue;
  anvil::Buffer<double, P::max_iter + 1> filter_theta, filter_phi;
  bool rti_prepared = false;       ///< a real-time iteration's QP is prepared
  int rti_failure[2] = {-1, -1};   ///< the function and output that made the preparation fail
  double rti_times[2] = {0, 0};    ///< the preparation's evaluation and QP update times
  double rti_regularization = 0.0;
};

template <class P>
class Solver {
 public:
  using WS = typename P::Workspace;
  using QP = typename P::QP;
  using Elastic = typename P::Elastic;
  using StatsT = Stats<P::max_iter>;
  static_assert(anvil::qp::implements_contract<QP>() && anvil::qp::implements_contract<Elastic>());
  static constexpr int nx = P::nx, ng = P::ng, nA = ng + nx, max_iter = P::max_iter;

  /// Solves from x0 (and multipliers lam_g0, lam_x0, zeros for a cold start); writes x, f, lam_g, lam_x, stats.
  static int call(const double* x0, const double* p, const double* lbx, const double* ubx, const double* lbg,
                  const double* ubg, const double* lam_g0, const double* lam_x0, double* x, double* f, double* lam_g,
                  double* lam_x, StatsT& stats, WS& ws) {
    auto& v = ws.v;
    double* grad = v.grad.data();
    double* g = v.g.data();
    double* trial = v.trial.data();
    double* g_trial = v.g_trial.data();
    double* lam_all = v.lam_all.data();
    stats = StatsT{};
    QP::reset(ws.qp);
    for (int i = 0; i < nx; ++i) {
      x[i] = x0[i];
      lam_x[i] = lam_x0[i];
    }
    for (int i = 0; i < ng; ++i) lam_g[i] = lam_g0[i];
    double reg = 0.0, theta_max = 0.0, theta_min = 0.0;
    int filter_size = 0;
    int status = max_iterations, k = 0;
    Clock::time_point clock = Clock::now();
    double fx = P::cost(x, p, ws);
    P::constraints(x, p, g, ws);
    for (;; ++k) {
      // *** derivatives, checked for NaN/inf ***
      record_failure(stats, cost, std::isfinite(fx) ? -1 : 0);
      record_failure(stats, cost_gradient, evaluate_gradient(x, p, ws));
      record_failure(stats, constraints, first_nonfinite(g, ng));
      record_failure(stats, constraint_jacobian, evaluate_jacobian(x, p, ws));
      if (stats.failed_function != none) {
        status = numerical_error;
        break;
      }
      // *** KKT residuals ***
      const Residuals kkt = residuals(x, g, lbx, ubx, lbg, ubg, lam_g, lam_x, ws);
      const double pr = kkt.primal, du = kkt.dual, l1 = kkt.l1, gmax = kkt.gradient_scale;
      stats.time_evaluation += lap(clock);
      stats.objective[k] = fx;
      stats.primal_infeasibility[k] = pr;
      stats.dual_infeasibility[k] = du;
      stats.complementarity[k] = kkt.complementarity;
      stats.regularization[k] = reg;
      if (P::verbose)
        std::printf("%s %4d  f %+.10e  pr %.3e  du %.3e  co %.3e  reg %.1e\n", P::name, k, fx, pr, du,
                    kkt.complementarity, reg);
      if (converged_at(kkt)) {
        status = converged;
        break;
      }
      if (k == max_iter) {
        status = max_iterations;
        break;
      }
      // *** the QP: min 1/2 d'(H + reg I)d + grad'd  s.t.  lbg - g <= J d <= ubg - g,  lbx - x <= d <= ubx - x ***
      if (int bad = evaluate_hessian(x, p, lam_g, ws); bad >= 0) {
        record_failure(stats, lagrangian_hessian, bad);
        status = numerical_error;
        break;
      }
      stats.time_evaluation += lap(clock);
      assemble_A(ws);
      assemble_bounds(x, g, lbx, ubx, lbg, ubg, ws);
      reg = reg > 0.0 ? std::fmax(reg * 0.1, P::reg_min) : 0.0;
      // NOTE: QPs far from the solution need not be solved to the final accuracy: each asks for 1e-2 of the KKT
      // error. A nonconvex or failed QP is retried with more regularization (x10), only as much as needed; later QPs
      // of one solve start from the previous QP's solution (never from an earlier call's).
      int qp_status = solve_regularized(std::fmax(pr, du), k > 0, reg, stats, clock, ws);
      const double* d = QP::primal(ws.qp);
      const double* y = QP::dual(ws.qp);
      int qp_iterations = QP::iterations(ws.qp);
      if (qp_status == anvil::qp::infeasible) {
        // NOTE: inconsistent linearized constraints: solve the elastic QP instead (slacks on every constraint row,
        // penalized by weight * their sum), which is always feasible and minimizes the violation of the
        // linearization.
        double lam_max = 0.0;
        for (int i = 0; i < ng; ++i) lam_max = std::fmax(lam_max, std::fabs(lam_g[i]));
        qp_status = solve_elastic(1e2 * std::fmax(1.0, std::fmax(lam_max, gmax)), reg, stats, clock, ws);
        d = Elastic::primal(ws.elastic);
        y = Elastic::dual(ws.elastic);
        qp_iterations = Elastic::iterations(ws.elastic);
        double dmax = 0.0, slack = 0.0, xmax = 1.0;
        for (int j = 0; j < nx; ++j) {
          dmax = std::fmax(dmax, std::fabs(d[j]));
          xmax = std::fmax(xmax, std::fabs(x[j]));
        }
        for (int i = 0; i < 2 * ng; ++i) slack += std::fmax(d[nx + i], 0.0);
        // a point where no step reduces the linearized violation: the constraints are locally infeasible
        if (qp_status == anvil::qp::solved && dmax <= P::tol * xmax && slack > P::tol) qp_status = anvil::qp::infeasible;
      }
      stats.qp_status[k] = qp_status;
      stats.qp_iterations[k] = qp_iterations;
      stats.time_qp_solve += lap(clock);
      stats.regularization[k] = reg;
      if (qp_status == anvil::qp::infeasible) {
        status = infeasible;
        break;
      }
      if (qp_status != anvil::qp::solved) {
        status = numerical_error;
        break;
      }
      for (int i = 0; i < nA; ++i) lam_all[i] = y[i];
      // *** filter line search (Waechter & Biegler): accept a trial point that sufficiently reduces the violation or
      // the objective and is not dominated by an earlier iterate; when the step promises enough decrease of f at a
      // small violation, ask for Armijo decrease of f instead (and keep the filter unchanged) ***
      double slope = 0.0;
      for (int j = 0; j < nx; ++j) slope += grad[j] * d[j];
      if (k == 0) {
        theta_max = 1e4 * std::fmax(1.0, l1);
        theta_min = 1e-4 * std::fmax(1.0, l1);
      }
      double alpha = 1.0, f_trial = fx, l1_trial = l1;
      bool f_type = false;
      // NOTE: a tiny step (at a solution whose multipliers are still off) can improve neither the violation nor the
      // objective: take it whole, without the filter, so the multipliers become the QP's (as IPOPT does).
      double dmax = 0.0, xmax = 1.0;
      for (int j = 0; j < nx; ++j) {
        dmax = std::fmax(dmax, std::fabs(d[j]));
        xmax = std::fmax(xmax, std::fabs(x[j]));
      }
      const bool tiny = dmax <= 1e-11 * xmax;
      for (;;) {
        for (int j = 0; j < nx; ++j) trial[j] = x[j] + alpha * d[j];
        f_trial = P::cost(trial, p, ws);
        P::constraints(trial, p, g_trial, ws);
        int w = -1;
        violation(trial, g_trial, lbx, ubx, lbg, ubg, &l1_trial, &w);
        bool ok = std::isfinite(f_trial) && first_nonfinite(g_trial, ng) < 0 && l1_trial <= theta_max;
        if (ok && tiny) break;
        for (int e = 0; ok && e < filter_size; ++e) ok = l1_trial < v.filter_theta[e] || f_trial < v.filter_phi[e];
        const bool switching = slope < 0.0 && alpha * std::pow(-slope, 2.3) > std::pow(l1, 1.1);
        f_type = l1 <= theta_min && switching;
        if (ok && f_type)
          ok = f_trial <= fx + P::armijo * alpha * slope;
        else if (ok)
          ok = l1_trial <= (1.0 - 1e-5) * l1 || f_trial <= fx - 1e-5 * l1;
        if (ok) break;
        alpha *= P::backtrack;
        if (alpha < P::min_step) break;
      }
      if (alpha >= P::min_step && !f_type && !tiny && filter_size <= max_iter) {
        v.filter_theta[filter_size] = (1.0 - 1e-5) * l1;
        v.filter_phi[filter_size] = fx - 1e-5 * l1;
        ++filter_size;
      }
      stats.step[k] = alpha;
      stats.time_line_search += lap(clock);
      if (alpha < P::min_step) {
        status = numerical_error;
        break;
      }
      for (int j = 0; j < nx; ++j) x[j] = trial[j];
      for (int i = 0; i < ng; ++i) {
        g[i] = g_trial[i];
        lam_g[i] += alpha * (lam_all[i] - lam_g[i]);
      }
      for (int j = 0; j < nx; ++j) lam_x[j] += alpha * (lam_all[ng + j] - lam_x[j]);
      fx = f_trial;
    }
    stats.time_evaluation += lap(clock);
    finish(x, g, lbx, ubx, lbg, ubg, k, status, stats);
    *f = fx;
    return status;
  }

  /// Real-time iteration, preparation phase: at the linearization point (x, lam_g) with parameter p, evaluate dg/dx
  /// and the Lagrangian Hessian, regularize it (screened on the equality rows of the expected bounds and the rows
  /// active in the previous QP) and load the QP's matrices. Returns converged when prepared, else numerical_error (a
  /// NaN/inf, reported by the next rti_feedback()).
  static int rti_prepare(const double* x, const double* p, const double* lam_g, const double* lbx, const double* ubx,
                         const double* lbg, const double* ubg, WS& ws) {
    auto& v = ws.v;
    Clock::time_point clock = Clock::now();
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
    double reg = 0.0;
    for (;;) {
      assemble_P(reg, ws);
      const int loaded = QP::load(v.Px.data(), v.Ax.data(), v.l.data(), v.u.data(), true, ws.qp);
      if (loaded == anvil::qp::solved) break;
      if (loaded != anvil::qp::nonconvex) return numerical_error;
      reg = reg > 0.0 ? reg * 10.0 : P::reg_min;
      if (reg > P::reg_max) return numerical_error;
    }
    QP::reset(ws.qp);
    v.rti_times[1] = lap(clock);
    v.rti_prepared = true;
    v.rti_regularization = reg;
    return converged;
  }

  /// Real-time iteration, feedback phase: with the (new) parameter p and bounds, evaluate f, the gradient and g at x,
  /// solve the prepared QP and take the full step; x, lam_g and lam_x are updated in place. Returns max_iterations
  /// after a step (converged when x already met the tolerance), infeasible or numerical_error (no step).
  static int rti_feedback(const double* p, const double* lbx, const double* ubx, const double* lbg, const double* ubg,
                          double* x, double* f, double* lam_g, double* lam_x, StatsT& stats, WS& ws) {
    auto& v = ws.v;
    stats = StatsT{};
    stats.time_evaluation = v.rti_times[0];
    stats.time_qp_update = v.rti_times[1];
    double* g = v.g.data();
    Clock::time_point clock = Clock::now();
    if (!v.rti_prepared) {
      record_failure(stats, v.rti_failure[0], v.rti_failure[1]);
      P::constraints(x, p, g, ws);
      finish(x, g, lbx, ubx, lbg, ubg, 0, numerical_error, stats);
      return numerical_error;
    }
    v.rti_prepared = false;
    double fx = P::cost(x, p, ws);
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
      // *** feedback: the prepared QP with the new vectors, solved; the full step ***
      assemble_bounds(x, g, lbx, ubx, lbg, ubg, ws);
      const int qp_status =
          QP::solve(v.grad.data(), v.l.data(), v.u.data(), 1e-2 * std::fmax(kkt.primal, kkt.dual), false, ws.qp);
      stats.time_qp_solve += lap(clock);
      stats.qp_status[0] = qp_status;
      stats.qp_iterations[0] = QP::iterations(ws.qp);
      if (qp_status == anvil::qp::infeasible) {
        status = infeasible;
      } else if (qp_status != anvil::qp::solved) {
        status = numerical_error;
      } else {
        const double* d = QP::primal(ws.qp);
        const double* y = QP::dual(ws.qp);
        for (int j = 0; j < nx; ++j) x[j] += d[j];
        for (int i = 0; i < ng; ++i) lam_g[i] = y[i];
        for (int j = 0; j < nx; ++j) lam_x[j] = y[ng + j];
        stats.step[0] = 1.0;
        status = converged_at(kkt) ? converged : max_iterations;
        fx = P::cost(x, p, ws);
        P::constraints(x, p, g, ws);
        double l1 = 0.0;
        int worst = -1;
        stats.objective[1] = fx;
        stats.primal_infeasibility[1] = violation(x, g, lbx, ubx, lbg, ubg, &l1, &worst);
        stats.dual_infeasibility[1] = stats.complementarity[1] = NAN;  // needs the next preparation's derivatives
        stats.time_evaluation += lap(clock);
      }
    } else {
      status = numerical_error;
    }
    finish(x, g, lbx, ubx, lbg, ubg, status == max_iterations || status == converged ? 1 : 0, status, stats);
    *f = fx;
    return status;
  }

 private:
  using Clock = std::chrono::steady_clock;

  /// The KKT residuals at an iterate (see SQPOptions.tol).
  struct Residuals {
    double primal = 0.0, dual = 0.0, complementarity = 0.0, gradient_scale = 1.0, l1 = 0.0;
    int worst = -1;
  };

  /// Seconds since `start`, and restarts it.
  static double lap(Clock::time_point& start) {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - start).count();
    start = now;
    return seconds;
  }

  /// Index of the first non-finite entry, or -1.
  static int first_nonfinite(const double* v, int n) {
    for (int i = 0; i < n; ++i)
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
  static int evaluate_gradient(const double* x, const double* p, WS& ws) {
    P::gradient(x, p, ws.v.grad.data(), ws);
    return first_nonfinite(ws.v.grad.data(), nx);
  }

  /// dg/dx at (x, p) into v.jac; the index of its first NaN/inf, or -1.
  static int evaluate_jacobian(const double* x, const double* p, WS& ws) {
    P::jacobian(x, p, ws.v.jac.data(), ws);
    return first_nonfinite(ws.v.jac.data(), P::nnz_jac);
  }

  /// The upper-triangular Hessian of f + lam'g at (x, p) into v.hess; the index of its first NaN/inf, or -1.
  static int evaluate_hessian(const double* x, const double* p, const double* lam_g, WS& ws) {
    P::hessian(x, p, lam_g, ws.v.hess.data(), ws);
    return first_nonfinite(ws.v.hess.data(), P::nnz_hess);
  }

  /// Max violation (primal infeasibility) and its index, and the L1 violation the filter measures.
  static double violation(const double* x, const double* g, const double* lbx, const double* ubx, const double* lbg,
                          const double* ubg, double* l1, int* worst) {
    double vmax = 0.0, sum = 0.0;
    *worst = -1;
    for (int i = 0; i < nA; ++i) {
      const double value = i < ng ? g[i] : x[i - ng];
      const double lo = i < ng ? lbg[i] : lbx[i - ng], hi = i < ng ? ubg[i] : ubx[i - ng];
      const double excess = value < lo ? lo - value : (value > hi ? value - hi : 0.0);
      sum += excess;
      if (excess > vmax) {
        vmax = excess;
        *worst = i;
      }
    }
    *l1 = sum;
    return vmax;
  }

  /// Complementarity: the largest |multiplier| x (distance to the bound its sign points at); a multiplier pointing at
  /// a bound that does not exist (±inf) counts as infinitely far.
  static double complementarity(const double* x, const double* g, const double* lbx, const double* ubx,
                                const double* lbg, const double* ubg, const double* lam_x, const double* lam_g) {
    double worst = 0.0;
    for (int i = 0; i < nA; ++i) {
      const double lam = i < ng ? lam_g[i] : lam_x[i - ng], value = i < ng ? g[i] : x[i - ng];
      const double lo = i < ng ? lbg[i] : lbx[i - ng], hi = i < ng ? ubg[i] : ubx[i - ng];
      if (lam == 0.0) continue;
      const double distance = lam > 0.0 ? hi - value : value - lo;
      worst = std::fmax(worst, std::isfinite(distance) ? std::fabs(lam * distance) : HUGE_VAL);
    }
    return worst;
  }

  static Residuals residuals(const double* x, const double* g, const double* lbx, const double* ubx,
                             const double* lbg, const double* ubg, const double* lam_g, const double* lam_x, WS& ws) {
    Residuals r;
    const double* grad = ws.v.grad.data();
    const double* jac = ws.v.jac.data();
    double* stationarity = ws.v.d.data();
    for (int j = 0; j < nx; ++j) {
      stationarity[j] = grad[j] + lam_x[j];
      r.gradient_scale = std::fmax(r.gradient_scale, std::fabs(grad[j]));
    }
    for (int j = 0; j < nx; ++j)
      for (int e = P::jac_p[j]; e < P::jac_p[j + 1]; ++e) stationarity[j] += jac[e] * lam_g[P::jac_i[e]];
    for (int j = 0; j < nx; ++j) r.dual = std::fmax(r.dual, std::fabs(stationarity[j]));
    r.primal = violation(x, g, lbx, ubx, lbg, ubg, &r.l1, &r.worst);
    r.complementarity = complementarity(x, g, lbx, ubx, lbg, ubg, lam_x, lam_g);
    return r;
  }

  static bool converged_at(const Residuals& r) {
    return r.primal <= P::tol && r.dual <= P::tol * r.gradient_scale && r.complementarity <= P::tol * r.gradient_scale;
  }

  /// d'(H + reg I)d - 1e-8 |d|^2 for the upper-triangular Hessian values `hess`.
  static double curvature(const double* hess, const double* d, double reg) {
    double c = 0.0, norm = 0.0;
    for (int j = 0; j < nx; ++j) {
      norm += d[j] * d[j];
      for (int e = P::hess_p[j]; e < P::hess_p[j + 1]; ++e) {
        const int i = P::hess_i[e];
        c += (i == j ? 1.0 : 2.0) * hess[e] * d[i] * d[j];
      }
    }
    return c + (reg - 1e-8) * norm;
  }

  /// The QP's constraint matrix A = [dg/dx; I] from v.jac.
  static void assemble_A(WS& ws) {
    for (int e = 0; e < P::nnz_jac; ++e) ws.v.Ax[P::jac_to_A[e]] = ws.v.jac[e];
    for (int j = 0; j < nx; ++j) ws.v.Ax[P::eye_to_A[j]] = 1.0;
  }

  /// The QP's P = triu(H) + reg I from v.hess.
  static void assemble_P(double reg, WS& ws) {
    for (int e = 0; e < P::nnz_P; ++e) ws.v.Px[e] = 0.0;
    for (int e = 0; e < P::nnz_hess; ++e) ws.v.Px[P::hess_to_P[e]] = ws.v.hess[e];
    for (int j = 0; j < nx; ++j) ws.v.Px[P::diag_P[j]] += reg;
  }

  /// The QP's bounds: lbg - g <= J d <= ubg - g, lbx - x <= d <= ubx - x.
  static void assemble_bounds(const double* x, const double* g, const double* lbx, const double* ubx,
                              const double* lbg, const double* ubg, WS& ws) {
    double* l = ws.v.l.data();
    double* u = ws.v.u.data();
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
  /// direction of nonnegative curvature; infeasible as soon as it is infeasible; nonconvex past reg_max. After a
  /// failed solve the next starts cold: a failed solve's iterate is no start for the next, more regularized QP (warm
  /// from it, ADMM was seen to stall at every regularization up to reg_max on the cart-pole swing-up).
  static int solve_regularized(double kkt_error, bool warm, double& reg, StatsT& stats, Clock::time_point& clock,
                               WS& ws) {
    auto& v = ws.v;
    for (;;) {
      assemble_P(reg, ws);
      int status = QP::load(v.Px.data(), v.Ax.data(), v.l.data(), v.u.data(), false, ws.qp);
      stats.time_qp_update += lap(clock);
      if (status == anvil::qp::solved) {
        status = QP::solve(v.grad.data(), v.l.data(), v.u.data(), 1e-2 * kkt_error, warm, ws.qp);
        warm = warm && status == anvil::qp::solved;
      }
      stats.time_qp_solve += lap(clock);
      if (status == anvil::qp::infeasible) return status;
      // NOTE: inertia-free curvature test: a step along which the regularized Hessian is not positive is no descent
      // direction, so it counts as nonconvex too
      if (status == anvil::qp::solved && curvature(v.hess.data(), QP::primal(ws.qp), reg) >= 0.0) return status;
      reg = reg > 0.0 ? reg * 10.0 : P::reg_min;
      if (reg > P::reg_max) return anvil::qp::nonconvex;
    }
  }

  /// The elastic QP, min 1/2 d'(H + reg I)d + grad'd + weight (1'v + 1'w) s.t. lbg - g <= J d + v - w <= ubg - g,
  /// the bounds on d, v, w >= 0 (regularized further while its solver finds it nonconvex).
  static int solve_elastic(double weight, double& reg, StatsT& stats, Clock::time_point& clock, WS& ws) {
    auto& v = ws.v;
    double* qe = v.qe.data();
    double* le = v.le.data();
    double* ue = v.ue.data();
    double* Axe = v.Axe.data();
    for (int j = 0; j < nx; ++j) qe[j] = v.grad[j];
    for (int i = 0; i < 2 * ng; ++i) {
      qe[nx + i] = weight;
      le[nA + i] = 0.0;
      ue[nA + i] = HUGE_VAL;
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
      Axe[P::slack_to_Ae[2 * ng + 2 * i]] = -1.0;
      Axe[P::slack_to_Ae[2 * ng + 2 * i + 1]] = 1.0;
    }
    Elastic::reset(ws.elastic);
    // NOTE: the normal QP stopped at its infeasibility before its convexity was checked: regularize as needed
    int status = anvil::qp::nonconvex;
    for (;;) {
      status = Elastic::load(v.Px.data(), Axe, le, ue, false, ws.elastic);
      if (status == anvil::qp::solved) status = Elastic::solve(qe, le, ue, 0.0, true, ws.elastic);
      if (status != anvil::qp::nonconvex || reg > P::reg_max) break;
      reg = reg > 0.0 ? reg * 10.0 : P::reg_min;
      assemble_P(reg, ws);
    }
    stats.time_qp_update += lap(clock);
    stats.time_qp_solve += lap(clock);
    return status;
  }

  /// Fills the end-of-solve diagnostics: the most violated constraint and its violation.
  static void finish(const double* x, const double* g, const double* lbx, const double* ubx, const double* lbg,
                     const double* ubg, int iterations, int status, StatsT& stats) {
    double l1 = 0.0;
    int worst = -1;
    violation(x, g, lbx, ubx, lbg, ubg, &l1, &worst);
    stats.worst_constraint = worst;
    stats.worst_violation =
        worst < 0 ? 0.0
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
