// anvil::qp: the statuses every QP solver reports, and the one contract every QP backend of the SQP solver meets.
//
// A backend solves QPs of one fixed sparsity pattern,
//
//   min 1/2 d'P d + q'd   s.t.   l <= A d <= u          (P: upper triangle, both in compressed columns),
//
// through a type B with a Workspace, the scalar type `real` it computes in (double, or float: a float32 solver's; written
// double below) and seven static functions (checked by implements_contract<B>()):
//
//   void reset(Workspace& ws)
//       The next solve starts cold: iterates and adaptive parameters back to their initial values, and the guess of
//       the active set forgotten. The loaded matrices stay.
//   void shift(Workspace& ws)
//       For a receding horizon: the next warm solve may start from the last solution moved one stage earlier, its
//       primal step from zero (a backend without stage structure starts cold, as after reset).
//   int load(const double* P, const double* A, const double* l, const double* u, bool screen, Workspace& ws)
//       Takes the values of P and A (which must stay valid and unchanged until the next load) and does the work that
//       needs only them (OSQP factors its KKT matrix here). With `screen`, or when the backend's solve could not tell
//       a nonconvex QP itself, it first tests whether P is positive definite on the null space of the rows expected
//       to be active (rows with l == u, and those active in the last solution): `nonconvex` if not, else `solved`.
//   int solve(const double* q, const double* l, const double* u, double tol, bool warm, Workspace& ws)
//       Solves with the loaded matrices to the accuracy tol asks for (each backend keeps it within what it can
//       deliver); warm starts from the previous solution (since the last reset) where the backend can. Returns a
//       Status.
//   const double* primal(const Workspace& ws), const double* dual(const Workspace& ws)
//       The last solution: the step d (n values) and the multipliers y of the rows of A (m values: positive at an
//       active upper bound, negative at an active lower bound, free for an equality row).
//   int iterations(const Workspace& ws)
//       The iterations the last solve took.
//
// and Workspace::deadline, a double the caller sets (an anvil::now() reading; 0, as a zeroed workspace has it: none):
// past it a solve stops after the iteration under way and returns max_iterations, its iterate as far as it got (the
// SQP solver's time limit reaches into its QPs so).
#ifndef ANVIL_QP_HPP
#define ANVIL_QP_HPP
#include <type_traits>

namespace anvil {
namespace qp {

/// How a QP solve ended.
enum Status : int { solved = 0, max_iterations = 1, infeasible = 2, nonconvex = 3, numerical_error = 4 };

/// True (at compile time) when B has the contract's Workspace and static functions with exactly these signatures (in
/// B::real).
template <class B>
constexpr bool implements_contract() {
  using T = typename B::real;
  using W = typename B::Workspace;
  static_assert(std::is_same_v<decltype(&B::reset), void (*)(W&)>, "QP backend: void reset(Workspace&)");
  static_assert(std::is_same_v<decltype(&B::shift), void (*)(W&)>, "QP backend: void shift(Workspace&)");
  static_assert(std::is_same_v<decltype(&B::load),
                               int (*)(const T*, const T*, const T*, const T*, bool, W&)>,
                "QP backend: int load(const real* P, const real* A, const real* l, const real* u, bool screen, "
                "Workspace&)");
  static_assert(std::is_same_v<decltype(&B::solve),
                               int (*)(const T*, const T*, const T*, T, bool, W&)>,
                "QP backend: int solve(const real* q, const real* l, const real* u, real tol, bool warm, "
                "Workspace&)");
  static_assert(std::is_same_v<decltype(&B::primal), const T* (*)(const W&)>,
                "QP backend: const real* primal(const Workspace&)");
  static_assert(std::is_same_v<decltype(&B::dual), const T* (*)(const W&)>,
                "QP backend: const real* dual(const Workspace&)");
  static_assert(std::is_same_v<decltype(&B::iterations), int (*)(const W&)>,
                "QP backend: int iterations(const Workspace&)");
  static_assert(std::is_same_v<decltype(W::deadline), double>, "QP backend: Workspace::deadline (double)");
  return true;
}

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_QP_HPP
