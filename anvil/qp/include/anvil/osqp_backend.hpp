// anvil::qp::OSQPBackend: the QP contract (anvil/qp.hpp) met by OSQP's own C code, embedded for one fixed pattern,
// optionally polished (anvil/kkt.hpp).
//
// Layout L: n, m, nnz_P, nnz_A; polish (bool); rho (the initial ADMM step size); max_iter, eps_abs, eps_rel (the
// final tolerances); static init_state(state, keep_matrices) (the generated `<prefix>state_init`); with polish, the
// tables of anvil::qp::ActiveSetKKT. Workspace W: osqp (the solver's `<prefix>state`: settings, data, factorization,
// iterates), bound_to (const void*: the workspace osqp's structures point into), l, u (anvil::Arrays of m: the
// bounds as OSQP takes them), iterations (int), polished (bool) and, with polish, the buffers of
// anvil::qp::ActiveSetKKT.
//
// Reentrant: each workspace holds its own solver. OSQP's structures point at each other, so a workspace sets its
// solver up where it lies at first use (a zeroed one: init) and again after it was copied bitwise (its structures
// still point into the original): the copy keeps its loaded matrices (factored again) and its next solve starts cold.
//
// Without polish, each solve runs ADMM to the final tolerances and the loaded matrices are not screened (a KKT
// factorization that fails inside OSQP reports `nonconvex`). With polish, each solve first runs ADMM only to the
// accuracy asked for (at least polish_eps, at most polish_max_iter iterations), then polishes; when the polish fails
// (a wrong active set) ADMM goes on towards the accuracy asked for (the final tolerances at most) in chunks that double
// in length, polishing after each, until one polish succeeds, ADMM reaches that accuracy (its own solution is then
// the answer) or max_iter is spent. Every load is screened by the KKT inertia test.
#ifndef ANVIL_OSQP_BACKEND_HPP
#define ANVIL_OSQP_BACKEND_HPP
#include <algorithm>
#include <cmath>

#include "anvil/kkt.hpp"
#include "anvil/qp.hpp"
#include "anvil/support.hpp"
#include "osqp.h"

namespace anvil {
namespace qp {

template <class L, class W>
struct OSQPBackend {
  using real = double;  ///< OSQP is built in double
  static_assert(sizeof(OSQPInt) == sizeof(int), "OSQP built with 32-bit ints");
  using Workspace = W;
  using KKT = ActiveSetKKT<L, W>;
  static constexpr double polish_eps = 1e-6;   ///< ADMM accuracy sought before polishing a QP solution
  static constexpr int polish_max_iter = 100;  ///< ADMM iterations before the first attempt to polish
  static constexpr int deadline_chunk = 50;    ///< ADMM iterations between two looks at the clock, with a deadline

  static void reset(W& ws) {
    OSQPSolver* solver = bound(ws);
    osqp_cold_start(solver);
    osqp_update_rho(solver, L::rho);
    if constexpr (L::polish) KKT::forget(ws);
    ws.iterations = 0;
    ws.polished = false;
  }

  /// OSQP's iterates have no stage structure to shift: the next solve starts cold.
  static void shift(W& ws) { reset(ws); }

  static int load(const double* P, const double* A, const double* l, const double* u, bool, W& ws) {
    OSQPSolver* solver = bound(ws);
    if constexpr (L::polish) {
      // NOTE: nonconvex on the (expected) active rows: say so before any factorization or ADMM work is spent on it
      if (!KKT::convex_on_active_set(P, A, l, u, ws)) return nonconvex;
    } else {
      (void)l;
      (void)u;
    }
    return osqp_update_data_mat(solver, P, OSQP_NULL, L::nnz_P, A, OSQP_NULL, L::nnz_A) == 0 ? solved : nonconvex;
  }

  static int solve(const double* q, const double* l, const double* u, double tol, bool warm, W& ws) {
    const bool moved = ws.bound_to != &ws;
    OSQPSolver* solver = bound(ws);
    if (!warm || moved) osqp_cold_start(solver);
    ws.iterations = 0;
    ws.polished = false;
    // NOTE: OSQP reads bounds beyond +-OSQP_INFTY as absent; clipped, an infinite bound never enters its arithmetic
    for (int i = 0; i < L::m; ++i) {
      ws.l[i] = std::fmax(l[i], -OSQP_INFTY);
      ws.u[i] = std::fmin(u[i], OSQP_INFTY);
    }
    if constexpr (L::polish) {
      return solve_polished(q, ws.l.data(), ws.u.data(), tol, ws);
    } else {
      (void)tol;
      if (osqp_update_data_vec(solver, q, ws.l.data(), ws.u.data()) != 0) return nonconvex;
      if (ws.deadline > 0.0) return admm_until(ws);
      if (osqp_solve(solver) != 0) return nonconvex;
      ws.iterations = static_cast<int>(solver->info->iter);
      return status_of(static_cast<int>(solver->info->status_val));
    }
  }

  static const double* primal(const W& ws) {
    if constexpr (L::polish) {
      if (ws.polished) return ws.polish_d.data();
    }
    return ws.osqp.sol_x;
  }

  static const double* dual(const W& ws) {
    if constexpr (L::polish) {
      if (ws.polished) return ws.polish_y.data();
    }
    return ws.osqp.sol_y;
  }

  static int iterations(const W& ws) { return ws.iterations; }

  /// OSQP's status as a Status (inaccurate solutions count as solved, as OSQP's own polish would accept them).
  static int status_of(int osqp_status) {
    switch (osqp_status) {
      case OSQP_SOLVED:
      case OSQP_SOLVED_INACCURATE:
        return solved;
      case OSQP_PRIMAL_INFEASIBLE:
      case OSQP_PRIMAL_INFEASIBLE_INACCURATE:
        return infeasible;
      case OSQP_MAX_ITER_REACHED:
        return max_iterations;
      case OSQP_NON_CVX:
        return nonconvex;
      default:
        return numerical_error;
    }
  }

 private:
  /// The workspace's solver, set up where the workspace lies (see the top of this file).
  static OSQPSolver* bound(W& ws) {
    if (ws.bound_to == &ws) return &ws.osqp.solver;
    const bool copied = ws.bound_to != nullptr;
    L::init_state(ws.osqp, copied);
    ws.bound_to = &ws;
    // NOTE: a failed factorization (a nonconvex load was copied) leaves it for the next load or solve to report
    if (copied) osqp_update_data_mat(&ws.osqp.solver, ws.osqp.data_P_csc_x, OSQP_NULL, L::nnz_P, ws.osqp.data_A_csc_x,
                                     OSQP_NULL, L::nnz_A);
    return &ws.osqp.solver;
  }

  /// ADMM to the final tolerances in chunks of deadline_chunk iterations, each continuing from the last, until it
  /// ends, max_iter is spent or ws.deadline passes (max_iterations, the iterate as far as it got): OSQP's embedded
  /// code has no clock of its own. The status; the iterations in ws.iterations.
  static int admm_until(W& ws) {
    OSQPSolver* solver = &ws.osqp.solver;
    const OSQPSettings settings = *solver->settings;
    OSQPSettings chunk = settings;
    int status = max_iterations;
    while (ws.iterations < L::max_iter && !(ws.iterations > 0 && anvil::expired(ws.deadline))) {
      chunk.max_iter = std::min(deadline_chunk, L::max_iter - ws.iterations);
      osqp_update_settings(solver, &chunk);
      status = osqp_solve(solver) == 0 ? status_of(static_cast<int>(solver->info->status_val)) : nonconvex;
      ws.iterations += static_cast<int>(solver->info->iter);
      if (status != max_iterations) break;
    }
    osqp_update_settings(solver, &settings);
    return status;
  }

  /// ADMM to the accuracy asked for, then the polish (see the top of this file); the status, with the solution in
  /// the polish's buffers when ws.polished. A polish that finds an active set nonconvex makes the QP nonconvex.
  static int solve_polished(const double* q, const double* l, const double* u, double tol, W& ws) {
    OSQPSolver* solver = &ws.osqp.solver;
    const double *P = ws.osqp.data_P_csc_x, *A = ws.osqp.data_A_csc_x;  // the loaded matrices
    OSQPSettings loose = *solver->settings;
    const double schedule = std::fmax(polish_eps, std::fmin(1e-3, tol));
    loose.eps_abs = std::fmax(L::eps_abs, schedule);
    loose.eps_rel = std::fmax(L::eps_rel, schedule);
    loose.max_iter = std::min(L::max_iter, polish_max_iter);
    // NOTE: the chunks aim at the accuracy asked for (the final tolerances only when it asks for them): where the
    // polish keeps failing (a degenerate active set), ADMM's own solution at that accuracy is the answer; aiming at
    // 1e-10 there, every QP of a cart-pole MPC ran the 20 000 iterations and its SQP, regularizing, ~2 s
    OSQPSettings chunk = loose;
    chunk.eps_abs = std::fmax(L::eps_abs, std::fmin(1e-3, 1e-2 * tol));
    chunk.eps_rel = std::fmax(L::eps_rel, std::fmin(1e-3, 1e-2 * tol));
    osqp_update_settings(solver, &loose);
    if (osqp_update_data_vec(solver, q, l, u) != 0 || osqp_solve(solver) != 0) return nonconvex;
    int status = status_of(static_cast<int>(solver->info->status_val));
    if (status != solved && status != max_iterations) return status;
    typename KKT::Polish outcome = KKT::polish(P, A, q, l, u, solver->solution->x, solver->solution->y, ws);
    int spent = static_cast<int>(solver->info->iter), extra = 0;
    // NOTE: with a deadline, chunks of deadline_chunk iterations (a doubled one might run far past it)
    while (outcome == KKT::polish_failed && spent < L::max_iter && !anvil::expired(ws.deadline)) {
      extra = spent;
      chunk.max_iter = std::min(ws.deadline > 0.0 ? deadline_chunk : spent, L::max_iter - spent);
      osqp_update_settings(solver, &chunk);
      status = osqp_solve(solver) == 0 ? status_of(static_cast<int>(solver->info->status_val)) : nonconvex;
      if (status != solved && status != max_iterations) break;
      spent += static_cast<int>(solver->info->iter);
      outcome = KKT::polish(P, A, q, l, u, solver->solution->x, solver->solution->y, ws);
      if (status == solved) break;
    }
    ws.iterations = static_cast<int>(solver->info->iter) + extra;
    ws.polished = outcome == KKT::polish_ok;
    if (outcome == KKT::polish_nonconvex) return nonconvex;
    return ws.polished ? solved : status;
  }
};

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_OSQP_BACKEND_HPP
