// anvil::qp::Condensed: partial condensing of an OCP QP (HPIPM's), solved by anvil::qp::Riccati.
//
// Blocks of M consecutive stages become one stage: its state is the block's first state, its inputs all the block's
// inputs, and the states inside the block are eliminated through the dynamics (x_j = Phi_j [x; u] + e_j). The
// condensed QP has ceil(N / M) stages of nx states and M nu inputs: a Riccati iteration costs about
// ceil(N / M) (nx + M nu)^3 instead of N (nx + nu)^3, for a condensing done once per solve (the block Hessians
// T_j' H_j T_j, the rows G_j T_j). It pays where nx is large against nu and the interior point takes many
// iterations. The rows of the inner states become dense rows of the block's variables (their bounds shifted by the
// dynamics' offsets); the inputs keep their box rows. A last block with fewer than M stages is padded with stages
// that pass the state through (A = I, B = 0, a unit Hessian on their inputs, no rows).
//
// The solution is expanded back: the inner states by the dynamics, the rows' multipliers row by row, and the inner
// dynamics multipliers by stationarity in x_j, pi_{j-1} = (H_j z_j + g_j)_x + A_j'pi_j + (G_j'lam_j)_x, from the
// block's own (the multiplier of its last stage). The block inputs are ordered [the inputs that enter the dynamics,
// stage by stage; then the others, stage by stage], so the columns of Phi_j that may be nonzero are a prefix.
#ifndef ANVIL_CONDENSING_HPP
#define ANVIL_CONDENSING_HPP
#include <cstring>

#include "anvil/riccati.hpp"

namespace anvil {
namespace qp {

/// The solver S (an anvil::qp::Riccati) on the QP condensed in blocks of M stages: S's Data in, S's Solution out.
template <class S, int M>
struct Condensed {
  using real = typename S::real;
  using T = real;
  using Data = typename S::Data;
  using Solution = typename S::Solution;
  static_assert(M >= 2, "a block condenses at least two stages");
  static constexpr int nx = S::nx, nu = S::nu, nz = S::nz, N = S::N, ng = S::ng, nud = S::nud, nb = S::nb;
  static constexpr int blocks = (N + M - 1) / M;
  static constexpr int nuB = M * nu, nzB = nx + nuB;  ///< a block's inputs and variables
  static constexpr int nphi = nx + M * nud;            ///< the block variables an inner state depends on
  static constexpr int stored = ng - nb;               ///< stored rows of G per stage
  /// a block's rows: with boxes, its variables' box rows, then per stage j its stored rows, those of j > 0 after
  /// the box rows of x_j (general rows of the block); else stage after stage
  static constexpr int ngB = S::box_rows ? nzB + M * stored + (M - 1) * nx : M * ng;
  using Inner = Riccati<nx, nuB, blocks, ngB, S::ngN, S::nuN, M * nud, T, S::box_rows, S::squared_prices>;
  static constexpr int mg = S::mg, mgN = S::mgN, muN = S::muN;

  /// The iterate expanded to every stage, as S's Workspace begins (x, u, uN, pi; a row's multiplier:
  /// multiplier(rows[k][m]); r_z[0]: the stationarity residual of x_0 and u_0), then the condensed QP and its solver's
  /// memory.
  struct Workspace {
    T x[N + 1][nx], u[N][nu], uN[muN], pi[N][nx];
    ipm::Row<T> rows[N][mg], rowsN[mgN];
    T r_z[1][nz];
    typename Inner::Data data;
    typename Inner::Workspace inner;
  };

  /// Solves the QP (riccati::solve: S::solve's contract).
  static int solve(const Data& d, T tol, int max_iter, Solution& sol, Workspace& ws, bool warm_start) {
    return riccati::solve<Condensed>(d, tol, max_iter, sol, ws, warm_start);
  }

  /// Condenses d, solves the condensed QP (warm_start: from the previous solution, when it was solved) and expands
  /// its solution into ws (S::solve_in_place's contract). The status and residual norms are the condensed QP's.
  static int solve_in_place(const Data& d, T tol, int max_iter, Workspace& ws, bool warm_start,
                            ipm::Residuals<T>& res, int& it, double deadline = 0.0) {
    condense(d, ws.data);
    const int status = Inner::solve_in_place(ws.data, tol, max_iter, ws.inner, warm_start, res, it, deadline);
    expand(d, ws);
    return status;
  }

  /// The next solve starts cold.
  static void reset(Workspace& ws) { ws.inner.warm = false; }

  /// Stage 0's feedback gain of the last factorization (S::feedback_gain): the rows of stage 0's inputs in the first
  /// block's gain, formed only here, where a sensitivity asks for it.
  static void feedback_gain(const Workspace& ws, T (&K)[nu][nx]) {
    T block[nuB][nx];
    Inner::feedback_gain(ws.inner, block);
    for (int i = 0; i < nu; ++i) copy(block[column(0, i) - nx], K[i]);
  }

  /// A row's multiplier (S::multiplier).
  static T multiplier(const ipm::Row<T>& r) { return S::multiplier(r); }

  /// S::shift: the multipliers and the rows' slacks move one stage earlier (the last stage keeps its own), the primal
  /// steps start from zero; into the condensed QP's iterate, block by block.
  static void shift(Workspace& ws) {
    for (int k = 0; k + 1 < N; ++k) {
      copy(ws.pi[k + 1], ws.pi[k]);
      copy(ws.rows[k + 1], ws.rows[k]);
    }
    auto& in = ws.inner;
    std::memset(in.x, 0, sizeof in.x);
    std::memset(in.u, 0, sizeof in.u);
    std::memset(in.uN, 0, sizeof in.uN);
    for (int b = 0; b < blocks; ++b) {
      for (int s = b * M; s < N && s < (b + 1) * M; ++s)
        for (int m = 0; m < ng; ++m) in.rows[b][row(s - b * M, m)] = ws.rows[s][m];
      copy(ws.pi[last_stage(b)], in.pi[b]);
    }
  }

  /// S::convex_on_equalities of the condensed QP (the same null space: the dynamics are eliminated exactly; the
  /// regularization I is on the block's variables).
  static bool convex_on_equalities(const Data& d, T regularization, Workspace& ws) {
    condense(d, ws.data);
    return Inner::convex_on_equalities(ws.data, regularization, ws.inner);
  }

  /// The block column of stage j's input i (inputs that enter the dynamics first).
  static constexpr int column(int j, int i) {
    return nx + (i < nud ? j * nud + i : M * nud + j * (nu - nud) + i - nud);
  }

  /// The block row of stage j's row m.
  static constexpr int row(int j, int m) {
    if constexpr (!S::box_rows) {
      return j * ng + m;
    } else {
      const int general = nzB + (j > 0 ? stored + (j - 1) * (nx + stored) : 0);  // stage j's first general row
      if (m < nx) return j == 0 ? m : general + m;
      if (m < nz) return column(j, m - nx);
      return general + (j > 0 ? nx : 0) + m - nz;
    }
  }

 private:
  /// to = from, for arrays of one shape.
  template <class A>
  static void copy(const A& from, A& to) {
    std::memcpy(&to, &from, sizeof to);
  }

  /// The condensed QP of d, in place (the condensed Data may be too large for the stack). Only what a solve reads is
  /// written: the row of G of a row without a bound is never read (most of a block's rows: the inner states' box rows
  /// of an OCP whose states are free), so it is left as it is instead of cleared at every solve.
  static void condense(const Data& d, typename Inner::Data& c) {
    for (int b = 0; b < blocks; ++b) condense_block(d, b, c);
    for (int i = 0; i < nx; ++i) c.x0[i] = d.x0[i];
    copy(d.HN, c.HN);
    copy(d.gN, c.gN);
    copy(d.GN, c.GN);
    copy(d.loN, c.loN);
    copy(d.hiN, c.hiN);
    copy(d.zN, c.zN);
    copy(d.wN, c.wN);
  }

  /// Block b: x_j = Phi [x; u] + e (only Phi's first nphi columns, x and the inputs that enter the dynamics, may be
  /// nonzero), the block's Hessian sum_j T_j'H_j T_j with T_j = [Phi; E_j] (E_j selects stage j's inputs), gradient
  /// sum_j T_j'(H_j [e; 0] + g_j), rows a'T_j (bounds less a'[e; 0]) and dynamics Phi_M, e_M. The Hessian is
  /// accumulated on its lower triangle and mirrored.
  static void condense_block(const Data& d, int b, typename Inner::Data& c) {
    T Phi[nx][nphi] = {}, e[nx] = {};
    for (int i = 0; i < nx; ++i) Phi[i][i] = 1;
    T(&H)[nzB][nzB] = c.H[b];
    std::memset(H, 0, sizeof H);
    std::memset(c.g[b], 0, sizeof c.g[b]);
    for (int m = 0; m < Inner::mg; ++m) {  // a padding stage's rows: none, hard
      c.lo[b][m] = -T(ipm::no_bound);
      c.hi[b][m] = T(ipm::no_bound);
      c.z[b][m] = 0;
      if constexpr (S::squared_prices) c.w[b][m] = 0;
    }
    condense_stage<0>(d, b, c, Phi, e);
    for (int i = 0; i < nzB; ++i)
      for (int q = 0; q < i; ++q) H[q][i] = H[i][q];
    for (int i = 0; i < nx; ++i) {
      for (int q = 0; q < nx; ++q) c.A[b][i][q] = Phi[i][q];
      for (int q = nx; q < nphi; ++q) c.B[b][i][q - nx] = Phi[i][q];
      for (int q = nphi; q < nzB; ++q) c.B[b][i][q - nx] = 0;  // the inputs that enter no dynamics
      c.c[b][i] = e[i];
    }
  }

  /// Stage j of block b, then the stages after it: Phi's nonzero columns are its first nx + j nud (x and the inputs
  /// of the stages before j that enter the dynamics), and every product is over those alone.
  template <int j>
  static void condense_stage(const Data& d, int b, typename Inner::Data& c, T (&Phi)[nx][nphi], T (&e)[nx]) {
    const int s = b * M + j;
    if (s >= N) {  // padding: a unit Hessian on the inputs, the state passed through
      for (int i = 0; i < nu; ++i) c.H[b][column(j, i)][column(j, i)] += 1;
    } else if constexpr (j == 0) {  // Phi = [I 0], e = 0: the products are copies
      add_first_cost(d.H[s], d.g[s], c.H[b], c.g[b]);
      add_rows(d, s, j, Phi, e, c, b);
      first_advance(d.A[s], d.B[s], d.c[s], Phi, e);
    } else {
      add_cost<j>(d.H[s], d.g[s], Phi, e, c.H[b], c.g[b]);
      add_rows(d, s, j, Phi, e, c, b);
      advance<j>(d.A[s], d.B[s], d.c[s], Phi, e);
    }
    if constexpr (j + 1 < M) condense_stage<j + 1>(d, b, c, Phi, e);
  }

  /// H += T_j'Hs T_j (lower triangle) and g += T_j'(Hs [e; 0] + gs), over Phi's first cols columns (its others are 0).
  /// Hs's state block Q and its input-state block S are checked for zeros first (a cost of weighted squares, as
  /// most MPC costs and every Gauss-Newton Hessian of one, has a diagonal Q and S = 0): a diagonal Q's products scale
  /// Phi's rows and e's entries, and S = 0 adds nothing. The products skipped would only have added exact zeros, so
  /// H and g are the same to the bit.
  template <int j>
  static void add_cost(const T (&Hs)[nz][nz], const T (&gs)[nz], const T (&Phi)[nx][nphi], const T (&e)[nx],
                       T (&H)[nzB][nzB], T (&g)[nzB]) {
    constexpr int cols = nx + j * nud;
    const bool diagonal = zero_state_columns<0, nx>(Hs), cross = !zero_state_columns<nx, nz>(Hs);
    T X[nx][nphi], h[nz];  // Q Phi (its first cols columns); Hs [e; 0] + gs
    if (diagonal) {
      for (int i = 0; i < nx; ++i) {
        for (int q = 0; q < cols; ++q) X[i][q] = Hs[i][i] * Phi[i][q];
        h[i] = gs[i] + Hs[i][i] * e[i];
      }
    } else {
      dense::multiply_blocked<nx, nx, cols>(Hs, Phi, X);
      dense::multiply_add<nx, nz, nx>(Hs, e, gs, h);
    }
    dense::add_lower_product<0, cols>(Phi, X, H);
    if (cross) {
      T Y[nu][nphi];  // S Phi: stage j's input columns come after every nonzero column of Phi
      dense::multiply_blocked<nu, nx, cols>(Hs + nx, Phi, Y);
      for (int i = 0; i < nu; ++i)
        for (int q = 0; q < cols; ++q) H[column(j, i)][q] += Y[i][q];
      dense::multiply_add<nu, nz, nx>(Hs + nx, e, gs + nx, h + nx);
    } else {
      for (int i = 0; i < nu; ++i) h[nx + i] = gs[nx + i];
    }
    for (int i = 0; i < nu; ++i)
      for (int k = 0; k < nu; ++k) H[column(j, i)][column(j, k)] += Hs[nx + i][nx + k];
    T phi_h[cols];
    dense::combine_rows<nx, nphi, cols>(h, Phi, phi_h);
    for (int q = 0; q < cols; ++q) g[q] += phi_h[q];
    for (int i = 0; i < nu; ++i) g[column(j, i)] += h[nx + i];
  }

  /// Whether Hs's rows first..last-1 are zero in the state columns off the diagonal (a NaN is not zero): rows 0..nx-1,
  /// Q diagonal; rows nx..nz-1, S = 0. A flag or-ed over each row's entries either side of the diagonal, a branch per
  /// row, not per entry (a few vector compares a row).
  template <int first, int last>
  static bool zero_state_columns(const T (&Hs)[nz][nz]) {
    for (int i = first; i < last; ++i) {
      int off = 0;
      for (int q = 0; q < i && q < nx; ++q) off |= Hs[i][q] != T(0);
      for (int q = i + 1; q < nx; ++q) off |= Hs[i][q] != T(0);
      if (off) return false;
    }
    return true;
  }

  /// add_cost at the block's first stage (T_0 = [I 0; 0 E_0], e = 0): H += Hs, g += gs, in the block's order.
  static void add_first_cost(const T (&Hs)[nz][nz], const T (&gs)[nz], T (&H)[nzB][nzB], T (&g)[nzB]) {
    for (int r = 0; r < nz; ++r) {
      const int cr = r < nx ? r : column(0, r - nx);
      for (int q = 0; q <= r; ++q) H[cr][q < nx ? q : column(0, q - nx)] += Hs[r][q];
      g[cr] += gs[r];
    }
  }

  /// advance from the block's first stage: Phi = [A B E_0], e = c.
  static void first_advance(const T (&A)[nx][nx], const T (&B)[nx][nu], const T (&c)[nx], T (&Phi)[nx][nphi],
                            T (&e)[nx]) {
    for (int i = 0; i < nx; ++i) {
      for (int q = 0; q < nx; ++q) Phi[i][q] = A[i][q];
      for (int k = 0; k < nud; ++k) Phi[i][column(0, k)] = B[i][k];
      e[i] = c[i];
    }
  }

  /// Stage s's rows (stage j of its block) as rows of the block, a'T_j, their bounds less a'[e; 0]; prices as they
  /// are. A row without bounds keeps its bounds only (the solver never reads its row of G).
  static void add_rows(const Data& d, int s, int j, const T (&Phi)[nx][nphi], const T (&e)[nx],
                       typename Inner::Data& c, int b) {
    for (int m = 0; m < ng; ++m) {
      const int r = row(j, m);
      c.z[b][r] = d.z[s][m];
      if constexpr (S::squared_prices) c.w[b][r] = d.w[s][m];
      if (!(d.lo[s][m] > -T(ipm::no_bound) || d.hi[s][m] < T(ipm::no_bound))) continue;  // inert
      T* out = r >= Inner::nb ? c.G[b][r - Inner::nb] : nullptr;  // its row of G (a block variable's box: none)
      if (out) std::fill(out + nphi, out + nzB, T(0));              // the inputs that enter no dynamics
      T offset = 0;
      if (m < nb) {  // a box row: of a block variable, or of an inner state (x_j's row of Phi)
        if (m < nx) offset = e[m];
        if (out) std::copy(Phi[m], Phi[m] + nphi, out);
      } else {
        const T* a = d.G[s][m - nb];
        dense::combine_rows<nx, nphi>(a, Phi, out);
        for (int i = 0; i < nu; ++i) out[column(j, i)] += a[nx + i];
        for (int l = 0; l < nx; ++l) offset += a[l] * e[l];
      }
      c.lo[b][r] = d.lo[s][m] - offset;
      c.hi[b][r] = d.hi[s][m] - offset;
    }
  }

  /// x_{j+1} = A x_j + B u_j + c: Phi <- A Phi + B E_j, e <- A e + c (Phi's first nx + j nud columns, then stage
  /// j's inputs' nud).
  template <int j>
  static void advance(const T (&A)[nx][nx], const T (&B)[nx][nu], const T (&c)[nx], T (&Phi)[nx][nphi], T (&e)[nx]) {
    constexpr int cols = nx + j * nud;
    T next[nx][nphi], ne[nx];
    dense::multiply_blocked<nx, nx, cols>(A, Phi, next);
    dense::multiply_add<nx, nx>(A, e, c, ne);
    for (int i = 0; i < nx; ++i) {
      e[i] = ne[i];
      for (int q = 0; q < cols; ++q) Phi[i][q] = next[i][q];
      for (int k = 0; k < nud; ++k) Phi[i][cols + k] = B[i][k];
    }
  }

  /// Block b's last stage (of the QP's).
  static int last_stage(int b) { return (b + 1) * M < N ? (b + 1) * M - 1 : N - 1; }

  /// The condensed iterate expanded to every stage: states by the dynamics, rows as they are, the inner dynamics
  /// multipliers by stationarity.
  static void expand(const Data& d, Workspace& ws) {
    const auto& in = ws.inner;
    for (int b = 0; b < blocks; ++b) {
      copy(in.x[b], ws.x[b * M]);
      for (int s = b * M; s <= last_stage(b); ++s) {
        const int j = s - b * M;
        for (int i = 0; i < nu; ++i) ws.u[s][i] = in.u[b][column(j, i) - nx];
        for (int m = 0; m < ng; ++m) ws.rows[s][m] = in.rows[b][row(j, m)];
        if (s < last_stage(b)) state_after(d, s, ws);
      }
      copy(in.pi[b], ws.pi[last_stage(b)]);
      for (int s = last_stage(b); s > b * M; --s) multiplier_before(d, s, ws);
    }
    copy(in.x[blocks], ws.x[N]);
    copy(in.uN, ws.uN);
    copy(in.rowsN, ws.rowsN);
    for (int i = 0; i < nx; ++i) ws.r_z[0][i] = in.r_z[0][i];
    for (int i = 0; i < nu; ++i) ws.r_z[0][nx + i] = in.r_z[0][column(0, i)];
  }

  /// x_{s+1} = A_s x_s + B_s u_s + c_s (the rows' sums independent chains, each in the order of the columns)
  static void state_after(const Data& d, int s, Workspace& ws) {
    dense::multiply_add<nx, nx>(d.A[s], ws.x[s], d.c[s], ws.x[s + 1]);
    for (int k = 0; k < nud; ++k)
      for (int i = 0; i < nx; ++i) ws.x[s + 1][i] += d.B[s][i][k] * ws.u[s][k];
  }

  /// pi_{s-1} = (H_s z_s + g_s)_x + A_s'pi_s + (G_s'lam_s)_x: stationarity in x_s, an inner state of its block (H_s
  /// symmetric: its rows' combinations, vectorized, each entry's terms in the order of l).
  static void multiplier_before(const Data& d, int s, Workspace& ws) {
    T r[nx];
    for (int i = 0; i < nx; ++i) r[i] = d.g[s][i];
    for (int l = 0; l < nx; ++l)
      for (int i = 0; i < nx; ++i) r[i] += d.H[s][l][i] * ws.x[s][l] + d.A[s][l][i] * ws.pi[s][l];
    for (int k = 0; k < nu; ++k)
      for (int i = 0; i < nx; ++i) r[i] += d.H[s][nx + k][i] * ws.u[s][k];
    for (int m = 0; m < ng; ++m) {
      const T lam = multiplier(ws.rows[s][m]);
      if (m < nb) {
        if (m < nx) r[m] += lam;
      } else {
        for (int i = 0; i < nx; ++i) r[i] += d.G[s][m - nb][i] * lam;
      }
    }
    for (int i = 0; i < nx; ++i) ws.pi[s - 1][i] = r[i];
  }
};

}  // namespace qp
}  // namespace anvil
#endif  // ANVIL_CONDENSING_HPP
