// anvil::qp::ipm: the parts of a primal-dual interior point for QPs that do not depend on how the Newton system is
// solved: one constraint row's state (slacks and multipliers of its sides, an equality's free multiplier, an elastic
// row's violation) and its part of each step, and Mehrotra's predictor-corrector loop around a solver's Newton
// systems, with a warm start's active-set step before it. The stage-structured solver (anvil/riccati.hpp, a Riccati
// recursion) and the general sparse one (anvil/sparse_ipm.hpp, a sparse LDL' factorization) share them.
//
// A row v = a'z between lo and hi has a side per finite bound: v - lo = t >= 0 (or hi - v = t), multiplier l >= 0. A
// row with lo == hi is a true equality: it keeps a free multiplier and enters the Newton system with a fixed weight
// 1/delta (a primal-dual regularized step), so its residual is exact and the factorization stays well conditioned,
// unlike lo = hi modelled as two bounds whose slacks both go to zero.
#ifndef ANVIL_INTERIOR_POINT_HPP
#define ANVIL_INTERIOR_POINT_HPP
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "anvil/dense.hpp"
#include "anvil/qp.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace qp {
namespace ipm {
constexpr double no_bound = 1e20;  ///< |bound| >= this: the side is absent
constexpr double fraction_to_boundary = 0.995;
constexpr double warm_floor = 1e-2;  ///< a warm start pushes slacks and multipliers up to at most this floor
/// delta, the primal-dual regularization of an equality row (about the square root of the arithmetic's precision)
template <class T>
constexpr T equality_regularization = anvil::by_precision<T>(1e-8, 2e-4f);

/// One side of an inequality row (v >= lo, or hi >= v): the slack t >= 0 and its multiplier l, and for an elastic row
/// the allowed violation s >= 0 (penalized by z per unit in the objective) and its multiplier m; the steps and the
/// residual r = distance - t + s (distance: v - lo, or hi - v); the elastic one, z - l - m, is `elastic_residual`.
template <class T>
struct Side {
  T t, l, dt, dl, r, s, m, ds, dm;
};

/// The prices of an elastic row's violation s on each side: z s + w s^2 / 2 (an L1 and an L2 penalty, as HPIPM's soft
/// constraints); both zero: a hard row.
template <class T>
struct Price {
  T z = 0, w = 0;
  bool elastic() const { return z > T(0) || w > T(0); }
  /// What the violation's multiplier m sees in the Newton system once s is eliminated: m + w s.
  T curvature(const Side<T>& q) const { return q.m + w * q.s; }
};

/// One row's interior-point state: its sides, and which are present. For an equality row, hi.l is its free
/// multiplier and lo.r its residual. A Price (the solver's data, passed to the functions that need its value) makes
/// the row elastic: each side may be violated at that price (the elastic variables are eliminated row by row, so the
/// stage sizes do not change).
template <class T>
struct Row {
  Side<T> lo, hi;
  bool eq, lo_on, hi_on, elastic;
};

/// f(side) for each present side of the row r (a Row or a const Row).
template <class R, class F>
inline void each_side(R& r, F&& f) {
  if (r.lo_on) f(r.lo);
  if (r.hi_on) f(r.hi);
}

/// Residual norms and the complementarity sum, accumulated over the rows.
template <class T>
struct Norms {
  T equality = 0.0, inequality = 0.0, complementarity = 0.0, sum = 0.0;
  int count = 0;
};

/// A present side's starting point: cold, t = max(distance, 1) and l = 1/t (elastic: s covers a violation, l = m =
/// z/2, or 1/2 for an L2 penalty alone); warm, the previous values floored at `floor` (starting again with a higher
/// floor is the same as starting with it once).
template <class T>
inline void start_side(Side<T>& q, same_t<T> distance, const Price<T>& price, bool warm, same_t<T> floor) {
  if (!warm) floor = 1.0;
  const bool elastic = price.elastic();
  const T half = T(0.5) * (price.z > T(0) ? price.z : T(1));
  q.s = elastic ? std::fmax(warm ? q.s : -distance + T(1), floor) : T(0);
  q.t = std::fmax(distance + q.s, floor);
  q.l = warm ? std::fmax(q.l, floor) : elastic ? half : T(1) / q.t;
  q.m = elastic ? (warm ? std::fmax(q.m, floor) : half) : T(0);
  q.dt = q.dl = q.ds = q.dm = 0.0;
}

/// Finite bounds with lo == hi: an equality row (a free multiplier and a fixed weight in the Newton system).
template <class T>
inline bool is_equality(T lo, same_t<T> hi) { return lo == hi && std::fabs(lo) < T(no_bound); }

/// Which sides of the row are present and their starting slacks and multipliers (a warm start's floored at `floor`).
/// Absent sides stay inert (t = 1, l = 0).
template <class T>
inline void start_row(Row<T>& r, same_t<T> v, same_t<T> lo, same_t<T> hi, const Price<T>& price, bool warm,
                      same_t<T> floor) {
  r.elastic = price.elastic();
  r.eq = is_equality(lo, hi) && !r.elastic;
  r.lo_on = !r.eq && lo > -T(no_bound);
  r.hi_on = !r.eq && hi < T(no_bound);
  if (r.eq) {
    r.hi.l = warm ? r.hi.l - r.lo.l : T(0);
    r.lo.l = 0.0;
    r.lo.t = r.hi.t = 1.0;
    r.lo.s = r.hi.s = r.lo.m = r.hi.m = r.lo.ds = r.hi.ds = r.lo.dm = r.hi.dm = 0.0;
    return;
  }
  for (Side<T>* q : {&r.lo, &r.hi}) {
    if (q == &r.lo ? r.lo_on : r.hi_on) {
      start_side(*q, q == &r.lo ? v - lo : hi - v, price, warm, floor);
    } else {
      q->t = 1.0;
      q->l = q->s = q->m = q->dt = q->dl = q->ds = q->dm = 0.0;
    }
  }
}

/// An elastic side's stationarity residual in its violation, z + w s - l - m (computed where needed: s, l and m change
/// only when a step is taken, so every use between two steps sees the same value).
template <class T>
inline T elastic_residual(const Side<T>& q, const Price<T>& price) {
  return price.z + price.w * q.s - q.l - q.m;
}

/// f(std::true_type) for an elastic row, f(std::false_type) for a hard one: the row's own flag (its price decided it
/// when the row was started) selects the side functions' `elastic` instance, so a hard row's never test or read its
/// price.
template <class T, class F>
inline auto by_kind(const Row<T>& r, F&& f) {
  return r.elastic ? f(std::true_type{}) : f(std::false_type{});
}

/// A present side's residuals at the distance to its bound, accumulated into n.
template <bool elastic, class T>
inline void side_residuals(Side<T>& q, same_t<T> distance, const Price<T>& price, Norms<T>& n) {
  q.r = distance - q.t + q.s;
  n.inequality = anvil::running_max(n.inequality, std::fabs(q.r));
  n.sum += q.l * q.t;
  n.complementarity = anvil::running_max(n.complementarity, q.l * q.t);
  ++n.count;
  if constexpr (elastic) {
    n.inequality = anvil::running_max(n.inequality, std::fabs(elastic_residual(q, price)));
    n.sum += q.m * q.s;
    n.complementarity = anvil::running_max(n.complementarity, q.m * q.s);
    ++n.count;
  }
}

/// The row's residuals at value v (an equality's in lo.r) at its price; returns its multiplier lam_hi - lam_lo.
template <class T>
inline T row_residuals(Row<T>& r, same_t<T> v, same_t<T> lo, same_t<T> hi, const Price<T>& price, Norms<T>& n) {
  if (r.eq) {
    r.lo.r = v - lo;
    n.equality = anvil::running_max(n.equality, std::fabs(r.lo.r));
    return r.hi.l;
  }
  by_kind(r, [&](auto elastic) {
    constexpr bool e = decltype(elastic)::value;
    if (r.lo_on) side_residuals<e>(r.lo, v - lo, price, n);
    if (r.hi_on) side_residuals<e>(r.hi, hi - v, price, n);
  });
  return r.hi.l - r.lo.l;
}

/// l t - target, plus the predictor's dl dt in the corrector.
template <class T>
inline T complementarity_residual(T l, same_t<T> t, same_t<T> dl, same_t<T> dt, same_t<T> target, bool corrector) {
  return l * t - target + (corrector ? dl * dt : T(0));
}

/// The side's slack as the Newton system sees it once the elastic variables are eliminated: t + l s / (m + w s).
template <bool elastic, class T>
inline T effective_slack(const Side<T>& q, const Price<T>& price) {
  if constexpr (elastic) {
    return q.t + q.l * q.s / price.curvature(q);
  } else {
    return q.t;
  }
}

/// The side's primal residual once the elastic variables are eliminated (for the complementarity target).
template <bool elastic, class T>
inline T effective_residual(const Side<T>& q, const Price<T>& price, same_t<T> target, bool corrector) {
  if constexpr (elastic) {
    const T cs = complementarity_residual(q.m, q.s, q.dm, q.ds, target, corrector);
    return q.r - (cs + q.s * elastic_residual(q, price)) / price.curvature(q);
  } else {
    return q.r;
  }
}

/// The weight the row adds to the Newton system's Hessian (as w a a' for its row a).
template <class T>
inline T row_weight(const Row<T>& r, const Price<T>& price) {
  if (r.eq) return T(1) / equality_regularization<T>;
  return by_kind(r, [&](auto elastic) {
    constexpr bool e = decltype(elastic)::value;
    return (r.lo_on ? r.lo.l / effective_slack<e>(r.lo, price) : T(0)) +
           (r.hi_on ? r.hi.l / effective_slack<e>(r.hi, price) : T(0));
  });
}

/// A side's part of the reduced gradient's coefficient (lower side: +, upper side: -).
template <bool elastic, class T>
inline T side_rhs(const Side<T>& q, const Price<T>& price, same_t<T> target, bool corrector) {
  const T c = complementarity_residual(q.l, q.t, q.dl, q.dt, target, corrector);
  return (c + q.l * effective_residual<elastic>(q, price, target, corrector)) / effective_slack<elastic>(q, price);
}

/// The coefficient e of the row in the reduced gradient (q += a e), for the complementarity target.
template <class T>
inline T row_rhs(const Row<T>& r, const Price<T>& price, same_t<T> target, bool corrector) {
  if (r.eq) return r.lo.r / equality_regularization<T>;
  return by_kind(r, [&](auto elastic) {
    constexpr bool e = decltype(elastic)::value;
    return (r.lo_on ? side_rhs<e>(r.lo, price, target, corrector) : T(0)) -
           (r.hi_on ? side_rhs<e>(r.hi, price, target, corrector) : T(0));
  });
}

/// A side's steps, given its distance's step gd (the corrector's products use the predictor's steps, read before
/// they are overwritten). Elastic: the violation's step from m ds + s dm = -cs and w ds - dl - dm = -e.
template <bool elastic, class T>
inline void side_step(Side<T>& q, same_t<T> gd, const Price<T>& price, same_t<T> target, bool corrector) {
  const T c = complementarity_residual(q.l, q.t, q.dl, q.dt, target, corrector);
  const T dl =
      -(c + q.l * (gd + effective_residual<elastic>(q, price, target, corrector))) / effective_slack<elastic>(q, price);
  if constexpr (elastic) {
    const T cs = complementarity_residual(q.m, q.s, q.dm, q.ds, target, corrector);
    const T e = elastic_residual(q, price);
    q.ds = -(cs + q.s * (e - dl)) / price.curvature(q);
    q.dm = e + price.w * q.ds - dl;
  }
  q.dt = gd + q.r + q.ds;
  q.dl = dl;
}

/// The slack and multiplier steps, given the row's primal step gd = a'dz.
template <class T>
inline void row_step(Row<T>& r, same_t<T> gd, const Price<T>& price, same_t<T> target, bool corrector) {
  if (r.eq) {
    r.hi.dl = (gd + r.lo.r) / equality_regularization<T>;
    return;
  }
  by_kind(r, [&](auto elastic) {
    constexpr bool e = decltype(elastic)::value;
    if (r.lo_on) side_step<e>(r.lo, gd, price, target, corrector);
    if (r.hi_on) side_step<e>(r.hi, -gd, price, target, corrector);
  });
}

/// Shrinks alpha so the row's slacks and multipliers stay nonnegative.
template <class T>
inline void row_limit(const Row<T>& r, T& alpha) {
  if (r.eq) return;  // an equality's multiplier is free
  // NOTE: both sides' ratios in one vector (GCC's and clang's vector extension): one division and one select for all
  // of them, where each ratio had its own. An absent side's slack, multiplier and steps stay 1, 0, 0, 0: steps that
  // are not negative, which never limit (a hard row's violation and its multiplier are not looked at). Each ratio is
  // taken by a select, not a branch: the signs of the steps change from side to side and iteration to iteration, a
  // branch on them is mispredicted often and costs more than the division, whose result (inf or NaN where dv >= 0:
  // IEEE arithmetic, no trap) is then not taken. The row's least ratio, then one comparison with alpha: the pass's
  // chain of minima (each waiting for the one before) has one link a row.
  by_kind(r, [&](auto elastic) {
    constexpr int lanes = decltype(elastic)::value ? 8 : 4;
    using vec = typename anvil::dense::Vector<T, lanes>::type;
    vec v, dv;
    if constexpr (lanes == 8) {
      v = vec{r.lo.t, r.lo.l, r.hi.t, r.hi.l, r.lo.s, r.lo.m, r.hi.s, r.hi.m};
      dv = vec{r.lo.dt, r.lo.dl, r.hi.dt, r.hi.dl, r.lo.ds, r.lo.dm, r.hi.ds, r.hi.dm};
    } else {
      v = vec{r.lo.t, r.lo.l, r.hi.t, r.hi.l};
      dv = vec{r.lo.dt, r.lo.dl, r.hi.dt, r.hi.dl};
    }
    const vec zero = {}, ratio = dv < zero ? -v / dv : zero + T(HUGE_VAL);
    T least = ratio[0];
    for (int i = 1; i < lanes; ++i) least = anvil::running_min(least, ratio[i]);
    alpha = anvil::running_min(alpha, least);
  });
}

/// Adds the row's complementarity products after a step of alpha.
template <class T>
inline void row_products(const Row<T>& r, same_t<T> alpha, T& sum, int& count) {
  each_side(r, [&](const Side<T>& q) {
    sum += (q.l + alpha * q.dl) * (q.t + alpha * q.dt);
    ++count;
    if (r.elastic) {
      sum += (q.m + alpha * q.dm) * (q.s + alpha * q.ds);
      ++count;
    }
  });
}

template <class T>
inline void row_take(Row<T>& r, same_t<T> alpha) {
  if (r.eq) {
    r.hi.l += alpha * r.hi.dl;
    return;
  }
  for (Side<T>* q : {&r.lo, &r.hi}) {
    q->t += alpha * q->dt;
    q->l += alpha * q->dl;
    q->s += alpha * q->ds;
    q->m += alpha * q->dm;
  }
}

/// The tightest tolerance a QP whose linear term is q (n entries) can meet: a residual is a sum of terms as large as
/// q (and as the data, of order 1 at least), so it cannot fall below their rounding (a gradient of 1e9 leaves 1e-7,
/// and an absolute 1e-6 asked of a QP of such data would never be met: it ran to its iteration limit).
template <class T>
inline T attainable(same_t<T> tol, const T* q, int n) {
  T q_max = 0;
  for (int j = 0; j < n; ++j) q_max = anvil::running_max(q_max, std::fabs(q[j]));
  return std::fmax(tol, T(1e3) * std::numeric_limits<T>::epsilon() * std::fmax(q_max, T(1)));
}

/// Infinity norms of an iterate's KKT residuals.
template <class T>
struct Residuals {
  T stationarity = 0.0, equality = 0.0, inequality = 0.0, complementarity = 0.0;
};

/// The largest alpha in (0, limit] keeping every present side's slack and multiplier nonnegative (S::for_rows).
template <class S, class W>
typename S::real max_step(W& ws, typename S::real limit = 1) {
  typename S::real alpha = limit;
  S::for_rows(ws, [&](const Row<typename S::real>& r) { row_limit(r, alpha); });
  return alpha;
}

/// Mean complementarity after a step of alpha (S::for_rows).
template <class S, class W>
typename S::real mu_after(W& ws, typename S::real alpha) {
  typename S::real sum = 0;
  int count = 0;
  S::for_rows(ws, [&](const Row<typename S::real>& r) { row_products(r, alpha, sum, count); });
  return count ? sum / typename S::real(count) : typename S::real(0);
}

/// Mehrotra's starting point for a cold start (Nocedal and Wright, 14.3): a full affine-scaling step from the naive
/// start (slacks at the distances to the bounds, at least 1, multipliers their inverses), then every slack and every
/// multiplier shifted by one amount each, so all are positive and balanced (their products near their mean). Without
/// it a QP whose multipliers are far from 1 (an elastic QP pricing violations at 1e5) starts so far from the central
/// path that its first steps are cut to 1e-6 of their length, and its products blow up.
template <class S, class D, class W>
void mehrotra_start(const D& d, W& ws, Residuals<typename S::real>& res) {
  using T = typename S::real;
  S::residuals(d, ws, res);
  if (!S::factor(d, ws)) return;  // the loop's own factorization says so
  S::newton_step(d, ws, T(0), false);
  S::take_step(ws, T(1));
  const auto each_present_side = [&](auto&& f) { S::for_rows(ws, [&](Row<T>& r) { each_side(r, f); }); };
  T t_min = T(HUGE_VAL), l_min = T(HUGE_VAL);
  each_present_side([&](Side<T>& q) {
    t_min = anvil::running_min(t_min, q.t);
    l_min = anvil::running_min(l_min, q.l);
  });
  const T t_shift = std::fmax(T(-1.5) * t_min, T(0)), l_shift = std::fmax(T(-1.5) * l_min, T(0));
  T products = 0.0, t_sum = 0.0, l_sum = 0.0;
  each_present_side([&](Side<T>& q) {
    products += (q.t + t_shift) * (q.l + l_shift);
    t_sum += q.t + t_shift;
    l_sum += q.l + l_shift;
  });
  const T t_center = l_sum > T(0) ? T(0.5) * products / l_sum : T(0);
  const T l_center = t_sum > T(0) ? T(0.5) * products / t_sum : T(0);
  each_present_side([&](Side<T>& q) {
    q.t = std::fmax(q.t + t_shift + t_center, T(1e-8));
    q.l = std::fmax(q.l + l_shift + l_center, T(1e-8));
  });
}

/// Weights for a guessed active set (active_set_step), read from the warm start. A side whose multiplier exceeds its
/// slack is pinned to its bound: its slack becomes pin times its multiplier, so its weight l/t is 1/pin, an equality
/// row's. The others are dropped: the multiplier becomes eps times the slack (at least tol), a weight of eps, nothing
/// to a Hessian and finite in an augmented system's -t/l. An elastic side's violation s is pinned at zero the same way
/// (s = pin m) unless it exceeds its multiplier m, which is then dropped (m = eps s): its price acts alone. A hard
/// side's unused s holds -margin, which moves the bound it is pinned to margin = tol / (100 max(1, l)) inside: the
/// interior point's solutions end there too (l t = tol / 100, its least target), so a hard bound (an actuator's
/// limit) holds in the NLP's step, not only up to the tolerance.
template <class S, class W>
void pin_active_set(W& ws, typename S::real tol) {
  using T = typename S::real;
  constexpr T pin = equality_regularization<T>, dropped = std::numeric_limits<T>::epsilon();
  S::for_rows(ws, [&](Row<T>& r) {
    each_side(r, [&](Side<T>& q) {
      const bool active = q.l > q.t;
      if (active) {
        q.t = pin * q.l;
      } else {
        q.t = std::fmax(q.t, tol);
        q.l = dropped * q.t;
      }
      if (!r.elastic) {
        q.s = active ? -T(0.01) * tol / std::fmax(T(1), q.l) : T(0);
      } else if (q.s > q.m) {
        q.s = std::fmax(q.s, tol);
        q.m = dropped * q.s;
      } else {
        q.m = std::fmax(q.m, tol);
        q.s = pin * q.m;
      }
    });
  });
}

/// The sides a step of 1 would leave with a negative slack, multiplier or violation (beyond tol): the changes of the
/// active set that step implies (0: it keeps the active set).
template <class S, class W>
int blocking_sides(W& ws, typename S::real tol) {
  using T = typename S::real;
  int blocking = 0;
  S::for_rows(ws, [&](const Row<T>& r) {
    each_side(r, [&](const Side<T>& q) {
      blocking += q.t + q.dt < -tol || q.l + q.dl < -tol || (r.elastic && (q.s + q.ds < -tol || q.m + q.dm < -tol));
    });
  });
  return blocking;
}

/// A warm start's guess at the active set, tried before the interior point (the hot start of an active-set method): the
/// sides the previous solution left active are pinned to their bounds (a hard side's a margin inside), the others
/// dropped (pin_active_set), and a Newton step toward zero complementarity solves the QP with that active set as
/// equalities, up to pin times the multipliers' change, left as distance to the (moved) bound. Two more steps on the
/// same factorization, the sides pinned again at the new multipliers, remove that rest where the point does not yet
/// meet tol with every hard side within its bound. A step that keeps every slack, multiplier and violation nonnegative
/// (within tol) is taken whole. One that does not changes the active set: a side it pushes past its bound is pinned,
/// one whose multiplier it turns negative dropped, and the QP solved again with that active set (the primal-dual
/// active-set method: a semismooth Newton method, superlinear near the solution), the primal point left where it was,
/// while each pass leaves fewer sides to change than the one before, at most max_swaps times, within max_factorizations
/// and before `deadline` (anvil::now(); 0: none). Where that ends with sides still to change, the step is taken only as
/// far as every slack, multiplier and violation stays nonnegative. Returns the factorizations taken where the point
/// meets tol, its complementarity an order below it (the pinning's residue, pin l dl: negligible in double, near a
/// float32 QP's tolerance, where such a point left an SQP stalled short of its own): a receding horizon's QP whose
/// active set held or changed by a few sides (an MPC step, an SQP near convergence) is then solved by one to a few
/// factorizations instead of 2-10 interior-point iterations. Else 0, the point reached the interior point's warm start,
/// or -1 where all max_swaps passes were taken and sides still change (the active set moved far from the warm start's:
/// the rows' slacks and multipliers, those of pinned and dropped sides far from the solution's, are then a worse start
/// for the interior point than a cold one).
template <class S, class D, class W>
int active_set_step(const D& d, W& ws, typename S::real tol, int max_factorizations, Residuals<typename S::real>& res,
                    double deadline) {
  using T = typename S::real;
  constexpr int refinements = 2, max_swaps = 3;
  const int swaps_allowed = std::min(max_swaps, max_factorizations - 1);
  int factorizations = 0, swaps = 0, refined = 0, blocking_before = std::numeric_limits<int>::max();
  for (bool factored = false;;) {
    pin_active_set<S>(ws, tol);
    S::residuals(d, ws, res);
    if (!factored && !S::factor(d, ws)) return 0;  // the refinements reuse it: the weights are the same
    factorizations += !factored;
    factored = true;
    S::newton_step(d, ws, T(0), false);
    const int blocking = blocking_sides<S>(ws, tol);
    const bool swap = blocking > 0 && swaps < swaps_allowed && blocking < blocking_before && !anvil::expired(deadline);
    if (!swap) S::take_step(ws, blocking == 0 ? T(1) : T(fraction_to_boundary) * max_step<S>(ws));
    bool inside = true;  // every hard side within its bound
    S::for_rows(ws, [&](Row<T>& r) {
      each_side(r, [&](Side<T>& q) {
        if (swap) {  // the side at the whole step: its signs there give the next pass's active set (pin_active_set)
          q.t += q.dt;
          q.l += q.dl;
          q.s += q.ds;
          q.m += q.dm;
        }
        if (!r.elastic) {
          q.t -= q.s;  // the slack to the bound itself (s: the pinned side's -margin)
          q.s = 0.0;
          inside = inside && q.t >= T(0);
        }
        q.t = std::fmax(q.t, T(0));
        q.l = std::fmax(q.l, T(0));
        q.s = std::fmax(q.s, T(0));
        q.m = std::fmax(q.m, T(0));
      });
    });
    if (swap) {
      ++swaps;
      blocking_before = blocking;
      factored = false;
      continue;
    }
    if (blocking > 0) return swaps == max_swaps ? -1 : 0;  // the interior point starts from here
    S::residuals(d, ws, res);
    if (inside && res.stationarity <= tol && res.equality <= tol && res.inequality <= tol &&
        res.complementarity <= T(0.1) * tol)
      return factorizations;
    if (refined++ == refinements) return 0;
  }
}

/// Mehrotra's predictor-corrector interior point on the Newton systems of S, a solver's static steps:
///   void start_rows(const D&, bool warm, T floor, W&)   the rows' starting points (a warm start's floored)
///   T residuals(const D&, W&, Residuals&)               the KKT residuals at the iterate; returns mu
///   bool factor(const D&, W&)                                factors the Newton system; false if nonconvex
///   void newton_step(const D&, W&, T target, bool corrector)
///   void take_step(W&, T alpha)                         the primal step and every row's (row_take)
///   for_rows(W&, f)                                          f(Row&) for every row with a bound (public)
/// and S::mehrotra_start: whether a cold start begins at Mehrotra's starting point.
/// Solves to tol (every residual norm) in at most max_iter iterations, from the iterate in ws (the caller's cold or
/// warm starting point; `warm` first tries the previous solution's active set (active_set_step: one iteration where
/// it holds), then restarts the rows from their previous slacks and multipliers). Returns the Status, the final
/// residuals and the iterations taken. Past `deadline` (an anvil::now() reading; 0: none) it stops after the iteration
/// under way, as at max_iter: the caller's time limit.
template <class S, class D, class W>
int mehrotra(const D& d, typename S::real tol, int max_iter, bool warm, W& ws, Residuals<typename S::real>& res,
             int& iterations, double deadline = 0.0) {
  using T = typename S::real;
  S::start_rows(d, warm, T(0), ws);
  if constexpr (S::mehrotra_start) {
    if (!warm) ipm::mehrotra_start<S>(d, ws, res);
  }
  if (warm && max_iter > 0) {
    const int factorizations = ipm::active_set_step<S>(d, ws, tol, max_iter, res, deadline);
    if (factorizations > 0) {
      iterations = factorizations;
      return solved;
    }
    if (factorizations < 0) warm = false;  // the rows start cold, at the primal point reached
    S::start_rows(d, warm, T(0), ws);  // the slacks at the distances again: the step's, or the warm start's
  }
  if (warm) {
    // NOTE: the floor a warm start lifts the slacks and multipliers to is the KKT residual of this QP at the
    // previous solution, within [tol, warm_floor]: a QP that barely changed (an SQP near convergence) starts
    // almost where it ends; a fixed 1e-2 made the residuals it meant to tolerate (4 iterations where 1-2 do), a
    // fixed 1e-4 made a QP whose active set changed take 21 iterations instead of 8
    S::residuals(d, ws, res);
    const T change = std::fmax(res.stationarity, std::fmax(res.equality, res.inequality));
    S::start_rows(d, warm, std::fmin(T(warm_floor), std::fmax(tol, change)), ws);
  }
  int status = max_iterations, it = 0, stalls = 0;
  T alpha = 0.0, equality_before = 0.0, mu_scale = 1.0;
  for (;; ++it) {
    const T mu = S::residuals(d, ws, res);
    // NOTE: divergence is measured against the first iterate's complementarity (at least 1): the products of a QP
    // whose data are large start large (bounds at 6.4e6: 4e13), and a fixed 1e14 called a feasible one infeasible
    if (it == 0) mu_scale = std::fmax(T(1), mu);
    if (!std::isfinite(mu + res.stationarity + res.equality + res.inequality)) {
      status = numerical_error;
      break;
    }
    if (res.stationarity <= tol && res.equality <= tol && res.inequality <= tol && res.complementarity <= tol) {
      status = solved;
      break;
    }
    if (it == max_iter || (it > 0 && anvil::expired(deadline))) break;
    if (mu > T(1e14) * mu_scale) {  // multipliers diverging: no feasible point
      status = infeasible;
      break;
    }
    // a step of alpha removes a fraction alpha of the equality residual when the equalities are consistent (up to
    // delta times the multiplier step); five steps in a row that remove less than half of that: they are not
    const bool stalled = it > 0 && equality_before > tol && res.equality >= (T(1) - T(0.5) * alpha) * equality_before;
    stalls = stalled ? stalls + 1 : 0;
    if (stalls == 5) {
      status = infeasible;
      break;
    }
    equality_before = res.equality;
    if (!S::factor(d, ws)) {
      status = nonconvex;
      break;
    }
    // predictor (affine scaling), then the corrector aiming at sigma mu with sigma = (mu_aff / mu)^3, but not below
    // tol / 100: complementarity products far below the tolerance only make slacks vanish (1e-18 and less were
    // seen) and the weights l / t so large that the factorization loses the Hessian to rounding and a convex QP
    // looks nonconvex
    S::newton_step(d, ws, T(0), false);
    const T sigma = std::pow(mu > T(0) ? mu_after<S>(ws, max_step<S>(ws)) / mu : T(0), T(3));
    S::newton_step(d, ws, std::fmax(sigma * mu, T(0.01) * tol), true);
    // NOTE: the full step where no row stops it before 1 / fraction_to_boundary (capping the largest step at 1 took
    // 0.995 of every step: a QP whose rows never block, an equality-constrained LQ problem, took 5-7 iterations
    // where its first step solves it)
    alpha = std::fmin(T(1), T(fraction_to_boundary) * max_step<S>(ws, T(1) / T(fraction_to_boundary)));
    S::take_step(ws, alpha);
  }
  iterations = it;
  return status;
}

}  // namespace ipm
}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_INTERIOR_POINT_HPP
