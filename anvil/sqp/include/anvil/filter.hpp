// anvil::sqp::Filter: the filter of a filter line search (Fletcher and Leyffer, with Waechter and Biegler's margins, as
// IPOPT's): pairs of a violation theta and an objective phi; a trial point must improve on every entry in one of them.
// Its entries live in storage the caller owns (a solver's workspace), so a filter is a few scalars and allocates
// nothing.
#ifndef ANVIL_FILTER_HPP
#define ANVIL_FILTER_HPP

#include <cmath>
#include <limits>

namespace anvil {
namespace sqp {

template <class real>
struct Filter {
  real* theta_entries = nullptr;  ///< the entries' violations (capacity of them)
  real* phi_entries = nullptr;    ///< the entries' objectives
  int capacity = 0, size = 0;
  real theta_max = 0.0, theta_min = 0.0;

  /// An empty filter for a phase starting at violation theta: no point above 1e4 max(1, theta) is accepted, and
  /// below 1e-4 max(1, theta) steps that promise objective decrease must achieve it (the switching condition).
  void start(real theta) {
    theta_max = real(1e4) * std::fmax(real(1), theta);
    theta_min = real(1e-4) * std::fmax(real(1), theta);
    size = 0;
  }
  /// Adds (theta, phi) with the margins (once full, the filter keeps its entries).
  void add(real theta, real phi) {
    if (size >= capacity) return;
    theta_entries[size] = (real(1) - real(1e-5)) * theta;
    phi_entries[size] = phi - real(1e-5) * theta;
    ++size;
  }
  /// Whether (theta, phi) improves on every entry (and theta is at most theta_max).
  bool acceptable(real theta, real phi) const {
    if (!(theta <= theta_max)) return false;
    for (int e = 0; e < size; ++e)
      if (!(theta < theta_entries[e] || phi < phi_entries[e])) return false;
    return true;
  }
  /// Whether a trial point (theta_trial, phi_trial) at step length alpha is acceptable from (theta, phi), whose
  /// model predicts a decrease `predicted` of phi: Armijo decrease (factor armijo) of phi where the switching
  /// condition holds (the filter is left as it is), else sufficient decrease of either (the point joins the filter).
  bool accepts(real theta, real phi, real predicted, real alpha, real theta_trial, real phi_trial, real armijo) {
    if (!acceptable(theta_trial, phi_trial)) return false;
    const bool phi_step = theta <= theta_min && predicted > real(0) &&
                          alpha * std::pow(predicted, real(2.3)) > std::pow(theta, real(1.1));
    // NOTE: decreases are compared up to the rounding of phi itself (IPOPT's 10 eps |phi|): near a solution the
    // promised decrease falls below it, and noise alone would reject full steps
    const real noise = real(10) * std::numeric_limits<real>::epsilon() * std::fabs(phi);
    if (phi_step) return phi_trial <= phi - armijo * alpha * predicted + noise;
    const real envelope = real(1) - real(1e-5);  // the filter's margin, as its entries'
    if (!(theta_trial <= envelope * theta || phi_trial <= phi - real(1e-5) * theta + noise)) return false;
    add(theta, phi);
    return true;
  }
};

}  // namespace sqp
}  // namespace anvil
#endif  // ANVIL_FILTER_HPP
