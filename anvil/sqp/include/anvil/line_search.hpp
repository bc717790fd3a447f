// anvil::sqp::LineSearch: the SQP loop's (anvil/sqp.hpp) two filter line searches, one per phase. The optimality
// phase's accepts a step by the (L1 violation, f) filter with an Armijo condition, takes a tiny step whole, and tries
// second-order corrections of a rejected full step (the Maratos effect); the restoration phase's accepts by the (hard
// rows' L1 violation, penalty f + rho * elastic violation) filter, and steers the price rho up at stationary points
// of the elastic NLP while that still buys less violation. The trial point is evaluated into the workspace; Solver<P>'s
// helpers (violations, the QP's bounds) do the arithmetic.
#ifndef ANVIL_LINE_SEARCH_HPP
#define ANVIL_LINE_SEARCH_HPP
#include <cmath>

#include "anvil/filter.hpp"
#include "anvil/qp.hpp"

namespace anvil {
namespace sqp {

template <class P>
class Solver;

/// The KKT residuals at an iterate (see SQPOptions.tol).
template <class real>
struct Residuals {
  real primal = 0.0, dual = 0.0, complementarity = 0.0, gradient_scale = 1.0, l1 = 0.0;
  real l1_hard = 0.0;  ///< the share of l1 on the rows the elastic QP keeps hard
  int worst = -1;
};

/// The two phases' filters and line searches of Solver<P>; the accepted trial point is left in v.trial and v.g_trial,
/// its objective and violations here.
template <class P>
struct LineSearch {
  using real = typename P::real;
  using WS = typename P::Workspace;
  using QP = typename P::QP;
  using Filter = anvil::sqp::Filter<real>;
  static constexpr int nx = P::nx, ng = P::ng, max_iter = P::max_iter;
  static constexpr real restoration_prox = real(1e-6);      ///< the least regularization of a restoration QP
  static constexpr real restoration_reduction = real(0.1);  ///< violation reduction that ends a restoration
  static constexpr real restoration_steering = real(1e4);   ///< the most the price may grow at stationary points

  Filter optimality, restoration;  ///< (L1 violation, f) and (hard rows' L1 violation, penalty)
  real theta_restoration = 0.0, rho = 0.0, f_trial = 0.0, l1_trial = 0.0;
  real rho_entry = 0.0;      ///< the price when the restoration began
  real l1_stationary = -real(1);  ///< the elastic rows' violation at the last stationary point (-1: none yet)
  real hard_trial = 0.0;  ///< the trial point's violation of the hard rows
  real prox = 0.0;        ///< the regularization the next restoration QP starts from

  /// The filters' entries in the workspace (max_iter + 1 each: at most one per iteration).
  explicit LineSearch(WS& ws)
      : optimality{ws.v.filter_theta.data(), ws.v.filter_phi.data(), max_iter + 1},
        restoration{ws.v.filter_theta.data() + max_iter + 1, ws.v.filter_phi.data() + max_iter + 1, max_iter + 1} {}

  /// The price rho of a unit of violation in the elastic QPs: set from the multipliers lam_g when first needed, and
  /// kept while the QPs stay elastic (their multipliers are the price itself: read back, it would grow x100 per
  /// iteration); a solved regular QP clears it.
  real price(const real* lam_g, const Residuals<real>& kkt) {
    if (rho == real(0)) rho = Solver<P>::penalty_weight(lam_g, kkt);
    return rho;
  }
  /// Entering the restoration phase at the price rho (see price()): the point joins the optimality filter, so the
  /// phase must leave it behind; the restoration's own filter starts empty.
  void enter_restoration(const Residuals<real>& kkt, real fx, const real* lam_g) {
    optimality.add(kkt.l1, fx);
    restoration.start(kkt.l1_hard);
    theta_restoration = kkt.l1;
    rho_entry = price(lam_g, kkt);
    l1_stationary = -real(1);
    prox = restoration_prox;
  }
  /// At a stationary point of the elastic NLP with violation left: true (rho x10, the restoration filter emptied)
  /// while the last price increase still reduced the violation by more than 1e-6 relative, up to
  /// restoration_steering x the entry price; false where the point is the least-violation one.
  bool steer(const Residuals<real>& kkt) {
    const real l1 = kkt.l1 - kkt.l1_hard;
    const bool moved = l1_stationary < real(0) || l1 < l1_stationary - real(1e-6) * std::fmax(real(1), l1);
    l1_stationary = l1;
    if (!moved || rho * real(10) > restoration_steering * rho_entry) return false;
    rho *= real(10);
    restoration.start(kkt.l1_hard);
    return true;
  }
  /// The elastic NLP's objective: f + rho (the elastic rows' L1 violation).
  real penalty(real fx, real l1, real l1_hard) const { return fx + rho * (l1 - l1_hard); }
  /// The restoration may end at the accepted trial point: enough less violation, and acceptable to the optimality
  /// filter; or feasible, the optimality filter then emptied where it rejects the point (nothing is left to
  /// restore: restoring on, the elastic QPs of a feasible point only minimize f, under the restoration's filter).
  bool restored(real tol) {
    if (l1_trial <= tol) {
      if (!optimality.acceptable(l1_trial, f_trial)) optimality.size = 0;
      return true;
    }
    return l1_trial <= restoration_reduction * theta_restoration && optimality.acceptable(l1_trial, f_trial);
  }

  /// Evaluates f, g and the violation at x + alpha d into v.trial, v.g_trial, f_trial and l1_trial; false at a
  /// NaN/inf.
  bool evaluate(const real* x, const real* d, real alpha, const real* p, const real* lbx,
                const real* ubx, const real* lbg, const real* ubg, WS& ws) {
    real* trial = ws.v.trial.data();
    for (int j = 0; j < nx; ++j) trial[j] = x[j] + alpha * d[j];
    f_trial = P::cost(trial, p, ws);
    P::constraints(trial, p, ws.v.g_trial.data(), ws);
    int worst = -1;
    Solver<P>::violation(trial, ws.v.g_trial.data(), lbx, ubx, lbg, ubg, &l1_trial, &worst, &hard_trial);
    return std::isfinite(f_trial) && Solver<P>::first_nonfinite(ws.v.g_trial.data(), ng) < 0;
  }

  /// The optimality phase's filter line search along the QP step d (L1 violation vs f). A tiny step (at a solution
  /// whose multipliers are still off) can improve neither: it is taken whole, without the filter, so the
  /// multipliers become the QP's (as IPOPT does). Returns the step length, 0 when none was acceptable.
  real optimality_step(const real* x, const real* p, const real* lbx, const real* ubx, const real* lbg,
                         const real* ubg, real fx, real l1, const real* d, bool correct, real qp_tol, WS& ws) {
    real slope = 0.0;
    for (int j = 0; j < nx; ++j) slope += ws.v.grad[j] * d[j];
    const bool tiny = Solver<P>::is_tiny(x, d);
    for (real alpha = 1.0; alpha >= P::min_step; alpha *= P::backtrack) {
      if (!evaluate(x, d, alpha, p, lbx, ubx, lbg, ubg, ws)) continue;
      if ((tiny && l1_trial <= optimality.theta_max) ||
          optimality.accepts(l1, fx, -slope, alpha, l1_trial, f_trial, P::armijo))
        return alpha;
      if constexpr (P::max_soc > 0) {
        // NOTE: a full step rejected although it made the violation worse (the Maratos effect: the constraints'
        // curvature, which the linearization misses): second-order corrections, as IPOPT's; where none is
        // accepted, the QP is solved again as it was (d and y are its solution's storage), to backtrack along
        if (correct && alpha == real(1) && !tiny && l1_trial >= l1) {
          if (corrected(x, p, lbx, ubx, lbg, ubg, fx, l1, slope, d, qp_tol, ws)) return alpha;
          Solver<P>::assemble_bounds(x, ws.v.g.data(), lbx, ubx, lbg, ubg, ws);
          if (QP::solve(ws.v.grad.data(), ws.v.l.data(), ws.v.u.data(), qp_tol, true, ws.qp) != anvil::qp::solved)
            return real(0);
        }
      }
    }
    return real(0);
  }

  /// Up to P::max_soc second-order corrections of the rejected full step d (its trial point in v.trial and
  /// v.g_trial): the QP, its matrices kept, solved again with the constants g(x + d) - J d, so that its step meets
  /// the linearization at x + d, until a corrected point is accepted (true: d and the multipliers, the QP's
  /// solution, are the corrected step's) or the violation stops falling by kappa_soc = 0.99 (false). The bounds of
  /// x's rows stay those of x.
  bool corrected(const real* x, const real* p, const real* lbx, const real* ubx, const real* lbg, const real* ubg,
                 real fx, real l1, real slope, const real* d, real qp_tol, WS& ws) {
    auto& v = ws.v;
    real* l = v.l.data();
    real* u = v.u.data();
    real theta_soc = l1_trial;
    for (int c = 0; c < P::max_soc; ++c) {
      // the rows' constants g(x + d) - J d (J d gathered in u first): a simplified Newton step toward them along J
      for (int i = 0; i < ng; ++i) u[i] = real(0);
      Solver<P>::add_jacobian_product(d, u, ws);
      for (int i = 0; i < ng; ++i) {
        const real constant = v.g_trial[i] - u[i];
        l[i] = lbg[i] - constant;
        u[i] = ubg[i] - constant;
      }
      if (QP::solve(v.grad.data(), l, u, qp_tol, true, ws.qp) != anvil::qp::solved) return false;
      d = QP::primal(ws.qp);
      if (!evaluate(x, d, real(1), p, lbx, ubx, lbg, ubg, ws)) return false;
      if (optimality.accepts(l1, fx, -slope, real(1), l1_trial, f_trial, P::armijo)) return true;
      if (!(l1_trial <= real(0.99) * theta_soc)) return false;
      theta_soc = l1_trial;
    }
    return false;
  }

  /// The restoration phase's filter line search along the elastic QP's step d (the hard rows' L1 violation vs the
  /// penalty, whose model promises a decrease `predicted`). Returns the step length, 0 when none was acceptable.
  real restoration_step(const real* x, const real* p, const real* lbx, const real* ubx, const real* lbg,
                          const real* ubg, const Residuals<real>& kkt, real phi, real predicted, const real* d,
                          WS& ws) {
    for (real alpha = 1.0; alpha >= P::min_step; alpha *= P::backtrack) {
      if (!evaluate(x, d, alpha, p, lbx, ubx, lbg, ubg, ws)) continue;
      if (restoration.accepts(kkt.l1_hard, phi, predicted, alpha, hard_trial,
                              penalty(f_trial, l1_trial, hard_trial), P::armijo))
        return alpha;
    }
    return real(0);
  }
};

}  // namespace sqp
}  // namespace anvil
#endif  // ANVIL_LINE_SEARCH_HPP
