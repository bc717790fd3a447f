// anvil::integrators::ExplicitRK: the exact first and second derivatives of an explicit Runge-Kutta step
// x_next = F(x, u, p), computed at run time from derivatives of the ODE alone (as acados's ERK integrator does):
//
//   forward:  x_next and S = dx_next/d[x; u] (nx x nz, nz = nx + nu), by propagating the sensitivities of every stage
//             point X_i through the ODE's Jacobian J_i = df/d[x; u] at (X_i, u): dK_i = J_i [DX_i; 0 I];
//   hessian:  the Hessian of lam'F in [x; u], by the adjoint sweep backwards over the stages (kappa_i, the adjoint of
//             the stage derivative K_i) and, at every stage point, the second-order term DZ_i' (d^2 kappa_i'f) DZ_i with
//             DZ_i = d(X_i, u)/d(x, u): the only nonlinear operations of the step are its ODE evaluations, so this
//             sum is the exact Hessian of the discrete step (not of the continuous flow).
//
// The generated code therefore holds the ODE's rate, its sparse Jacobian and the sparse Hessian of mu'f only: one
// small function each, whatever the number of integration steps; the steps are a loop here.
//
// O (the ODE and the method): real (the scalar type), nx, nu, stages, steps, h, a[stages][stages] (strictly lower),
// b[stages]; jac_nnz, jac_p[nz + 1], jac_i[jac_nnz] (the Jacobian's CSC pattern, nx x nz) and the same entries row
// by row: jac_row_p[nx + 1], jac_row_u[nx] (where the row's input columns start), jac_row_j[jac_nnz] (column),
// jac_row_e[jac_nnz] (position in the CSC values); hess_nnz,
// hess_p[nz + 1], hess_i[hess_nnz] (the upper triangle of the Hessian of mu'f, nz x nz), hess_rows[n_hess_rows] (the
// coordinates of [x; u] among its rows and columns: the others enter f linearly) and hess_of[nz] (each coordinate's
// position in hess_rows, -1 where f is linear in it). E (the evaluations, with their workspaces): rate(z, p, xdot),
// jacobian(z, p, values), hessian(z, mu, p, values) at z = [x; u]. second_order: keep every stage point's
// sensitivities for hessian() (else one is reused, which keeps a Jacobian-only pass in the L1 cache).
#ifndef ANVIL_EXPLICIT_RK_HPP
#define ANVIL_EXPLICIT_RK_HPP
#include <utility>

#include "anvil/dense.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace integrators {

template <class O, bool second_order>
struct ExplicitRK {
  using real = typename O::real;  ///< the scalar type of the step (double, or float)
  static constexpr int nx = O::nx, nu = O::nu, nz = nx + nu, s = O::stages, steps = O::steps;
  static constexpr int points = steps * s;  ///< ODE evaluations per step of F
  static constexpr int kept = second_order ? points : 1;  ///< stage points whose sensitivities are kept
  static constexpr int jac_nnz = O::jac_nnz > 0 ? O::jac_nnz : 1;
  static constexpr int hess_nnz = O::hess_nnz > 0 ? O::hess_nnz : 1;
  /// The rows of DZ = d(X_i, u)/d(x, u) = [DX_i; 0 I] that the Hessian of mu'f touches (at least one stored).
  static constexpr int touched = O::n_hess_rows > 0 ? O::n_hess_rows : 1;

  /// The stage points, their sensitivities and the ODE's Jacobian there (kept for every point by forward() for
  /// hessian() with second_order, else one of each is reused), and the scratch of the passes. Plain arrays: no
  /// allocation.
  // NOTE: every array starts on a cache line (A): GCC 12 at -O2 vectorized advance() with aligned loads of x and K,
  // taking them for 16-byte aligned where they were not (x at 8 mod 16 inside a 64-aligned workspace): a segfault
  struct Workspace {
    static constexpr std::size_t A = anvil::kAlignment;
    alignas(A) real z[kept][nz];       ///< [X_i; u] at the stage point
    alignas(A) real DX[kept][nx][nz];  ///< dX_i/d[x; u]
    alignas(A) real J[kept][jac_nnz];  ///< df/d[x; u] at the stage point (CSC values)
    alignas(A) real K[s][nx];
    alignas(A) real dK[s][nx][nz];
    alignas(A) real x[nx];
    alignas(A) real S[nx][nz];
    alignas(A) real kappa[s][nx];
    alignas(A) real xi[s][nx];
    alignas(A) real lam[nx];
    alignas(A) real hf[hess_nnz];
    alignas(A) real D[touched][nz];  ///< DZ's touched rows
    alignas(A) real T[touched][nz];  ///< Hf times them
    alignas(A) real Q[nz][nz];       ///< the sum of DZ' Hf DZ
  };

  /// x_next = F(x, u, p) alone (the ODE's rate at every stage point, no sensitivities); true (an explicit step does
  /// not fail: a non-finite rate gives a non-finite x_next).
  template <class E>
  static bool step(const real* x0, const real* u, const real* p, real* x_next, Workspace& w, E& eval) {
    for (int r = 0; r < nx; ++r) w.x[r] = x0[r];
    real* z = w.z[0];
    for (int c = 0; c < nu; ++c) z[nx + c] = u[c];
    for (int n = 0; n < steps; ++n) {
      for (int i = 0; i < s; ++i) {
        stage_point(i, w, z);
        eval.rate(z, p, w.K[i]);
      }
      advance(w);
    }
    for (int r = 0; r < nx; ++r) x_next[r] = w.x[r];
    return true;
  }

  /// x_next = F(x, u, p) and jac = dx_next/d[x; u] (row-major, nx x nz); keeps what hessian() needs; true.
  template <class E>
  static bool forward(const real* x0, const real* u, const real* p, real* x_next, real* jac, Workspace& w,
                      E& eval) {
    for (int r = 0; r < nx; ++r) {  // S = [I 0]: zeros, then the diagonal (no compare per entry)
      w.x[r] = x0[r];
      for (int c = 0; c < nz; ++c) w.S[r][c] = real(0);
      w.S[r][r] = real(1);
    }
    for (int n = 0; n < steps; ++n) {
      sensitivity_points(n, u, p, w, eval, std::make_integer_sequence<int, s>{});
      advance(w);
      // S += h sum_i b_i dK_i, in place (every row's entries are loaded before it is stored)
      for (int r = 0; r < nx; ++r)
        dense::combine_pointed<1, nz>([](int, int l) { return l == 0 ? real(1) : O::h * O::b[l - 1]; },
                                      [&](int l) { return l == 0 ? w.S[r] : w.dK[l - 1][r]; }, s + 1, w.S + r);
    }
    for (int r = 0; r < nx; ++r) {
      x_next[r] = w.x[r];
      for (int c = 0; c < nz; ++c) jac[r * nz + c] = w.S[r][c];
    }
    return true;
  }

  /// H (row-major nz x nz, upper triangle) += the Hessian of lam'F in [x; u] at the point of the last forward().
  template <class E>
  static void hessian(const real* lam, const real* p, real* H, Workspace& w, E& eval) {
    static_assert(second_order, "hessian() needs the sensitivities of every stage point: ExplicitRK<O, true>");
    for (int r = 0; r < nx; ++r) w.lam[r] = lam[r];
    for (int r = 0; r < nz; ++r)
      for (int c = 0; c < nz; ++c) w.Q[r][c] = real(0);
    for (int n = steps - 1; n >= 0; --n) {
      for (int i = s - 1; i >= 0; --i) {
        const int at = n * s + i;
        for (int r = 0; r < nx; ++r) {
          real v = O::h * O::b[i] * w.lam[r];
          for (int j = i + 1; j < s; ++j) v += O::h * O::a[j][i] * w.xi[j][r];
          w.kappa[i][r] = v;
        }
        // xi_i = J_x' kappa_i: the adjoint of the stage point
        for (int q = 0; q < nx; ++q) {
          real v = 0.0;
          for (int e = O::jac_p[q]; e < O::jac_p[q + 1]; ++e) v += w.J[at][e] * w.kappa[i][O::jac_i[e]];
          w.xi[i][q] = v;
        }
        eval.hessian(w.z[at], w.kappa[i], p, w.hf);
        add_second_order(w.DX[at], w);
      }
      for (int i = 0; i < s; ++i)
        for (int r = 0; r < nx; ++r) w.lam[r] += w.xi[i][r];
    }
    for (int r = 0; r < nz; ++r)  // Q's lower triangle is H's upper one
      for (int c = r; c < nz; ++c) H[r * nz + c] += w.Q[c][r];
  }

 private:
  /// The stage points i... of step n in order: each point, its rate and Jacobian, and dK_i = J_i [DX_i; 0 I].
  template <class E, int... i>
  ANVIL_KERNEL void sensitivity_points(int n, const real* u, const real* p, Workspace& w, E& eval,
                                       std::integer_sequence<int, i...>) {
    (sensitivity_point<i>(n, u, p, w, eval), ...);
  }

  /// Stage point i of step n (i known at compile time: the zero coefficients of a drop out of DX_i's sum).
  template <int i, class E>
  ANVIL_KERNEL void sensitivity_point(int n, const real* u, const real* p, Workspace& w, E& eval) {
    const int at = second_order ? n * s + i : 0;
    real* z = w.z[at];
    real* J = w.J[at];
    real(&DX)[nx][nz] = w.DX[at];
    stage_point(i, w, z);
    for (int c = 0; c < nu; ++c) z[nx + c] = u[c];
    eval.rate(z, p, w.K[i]);
    eval.jacobian(z, p, J);
    // DX_i = S + h sum_j a_ij dK_j; at a point with a zero row of a (the first), S itself, read in place (copied
    // only where the point's sensitivities are kept), and at the first step's S = [I 0], dK_i = J itself
    if constexpr (couplings(i).count == 0) {  // no earlier stage's derivatives in DX_i
      if constexpr (second_order)
        for (int r = 0; r < nx; ++r)
          for (int c = 0; c < nz; ++c) DX[r][c] = w.S[r][c];
      if (n == 0) {
        for (int r = 0; r < nx; ++r) {
          for (int c = 0; c < nz; ++c) w.dK[i][r][c] = real(0);
          for (int e = O::jac_row_p[r]; e < O::jac_row_p[r + 1]; ++e) w.dK[i][r][O::jac_row_j[e]] = J[O::jac_row_e[e]];
        }
      } else {
        stage_sensitivity(J, w.S, w.dK[i]);
      }
    } else {
      constexpr Couplings terms = couplings(i);
      for (int r = 0; r < nx; ++r)
        dense::combine_pointed<1, nz>([&](int, int l) { return l == 0 ? real(1) : terms.f[l - 1]; },
                                      [&](int l) { return l == 0 ? w.S[r] : w.dK[terms.j[l - 1]][r]; },
                                      terms.count + 1, DX + r);
      stage_sensitivity(J, DX, w.dK[i]);
    }
  }

  /// The nonzero coefficients h a_ij of a stage point's row of a (j < i, in order) and the stages j they weigh.
  struct Couplings {
    int count = 0;
    int j[s] = {};
    real f[s] = {};
  };

  /// Stage point i's Couplings (known at compile time): DX_i = S + sum of f dK_j over them, each row summed in local
  /// vectors (dense::combine_pointed, S's row first with coefficient 1): in a local array the auto-vectorizer's
  /// half-width stores were read back as whole vectors, a store-forwarding stall on every row.
  static constexpr Couplings couplings(int i) {
    Couplings c;
    for (int j = 0; j < i; ++j)
      if (O::a[i][j] != real(0)) {
        c.j[c.count] = j;
        c.f[c.count++] = O::h * O::a[i][j];
      }
    return c;
  }

  /// The states of stage point i: z = x + h sum_j a_ij K_j.
  static void stage_point(int i, const Workspace& w, real* z) {
    for (int r = 0; r < nx; ++r) {
      real v = w.x[r];
      for (int j = 0; j < i; ++j) v += O::h * O::a[i][j] * w.K[j][r];
      z[r] = v;
    }
  }

  /// The step's end: x += h sum_i b_i K_i.
  static void advance(Workspace& w) {
    for (int r = 0; r < nx; ++r)
      for (int i = 0; i < s; ++i) w.x[r] += O::h * O::b[i] * w.K[i][r];
  }

  /// y += v x, over n entries (x and y never overlap: vectorized without a run-time overlap check, which at short
  /// lengths left the loop scalar).
  template <int n>
  static void axpy(real v, const real* ANVIL_RESTRICT x, real* ANVIL_RESTRICT y) {
    for (int c = 0; c < n; ++c) y[c] += v * x[c];
  }

  /// dK = J [DX; 0 I] with J sparse, row by row: a combination of DX's rows (the row's state entries, listed first,
  /// dense::combine_pointed: the row's sums in local vectors, each column's terms in the order of the entries), then
  /// its input entries added where they sit. A loop over the generated tables (constexpr): every entry unrolled at
  /// compile time, in blocks of 128 bytes of columns, compiled to straight-line code 2-3x slower than this loop (the
  /// 45-state chain: a block's few accumulators one chain of dependent additions each, DX's rows loaded once a block).
  static void stage_sensitivity(const real* J, const real (&DX)[nx][nz], real (&dK)[nx][nz]) {
    for (int r = 0; r < nx; ++r) {
      const int first = O::jac_row_p[r];
      dense::combine_pointed<1, nz>([&](int, int l) { return J[O::jac_row_e[first + l]]; },
                                    [&](int l) { return DX[O::jac_row_j[first + l]]; }, O::jac_row_u[r] - first,
                                    dK + r);
      for (int e = O::jac_row_u[r]; e < O::jac_row_p[r + 1]; ++e) dK[r][O::jac_row_j[e]] += J[O::jac_row_e[e]];
    }
  }

  /// Q += DZ' Hf DZ (lower triangle), Hf symmetric given by its upper triangle (CSC) in w.hf: on DZ's rows that Hf
  /// touches alone (D, DZ's rows of the coordinates in hess_rows), T = Hf D entry by entry, then D'T as one product
  /// of compile-time sizes (anvil::dense). Nothing where f is linear.
  static void add_second_order(const real (&DX)[nx][nz], Workspace& w) {
    if constexpr (O::n_hess_rows == 0) return;
    for (int e = 0; e < O::n_hess_rows; ++e) {
      const int q = O::hess_rows[e];
      for (int c = 0; c < nz; ++c) w.D[e][c] = q < nx ? DX[q][c] : real(c == q);
    }
    for (int r = 0; r < touched; ++r)
      for (int c = 0; c < nz; ++c) w.T[r][c] = real(0);
    for (int b = 0; b < nz; ++b)
      for (int e = O::hess_p[b]; e < O::hess_p[b + 1]; ++e) {
        const int a = O::hess_of[O::hess_i[e]], col = O::hess_of[b];
        axpy<nz>(w.hf[e], w.D[col], w.T[a]);
        if (a != col) axpy<nz>(w.hf[e], w.D[a], w.T[col]);
      }
    dense::add_lower_product<0>(w.D, w.T, w.Q);
  }
};

}  // namespace integrators
}  // namespace anvil
#endif  // ANVIL_EXPLICIT_RK_HPP
