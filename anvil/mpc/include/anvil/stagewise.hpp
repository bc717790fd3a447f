// anvil::stagewise: the dynamics' part of a multiple-shooting NLP's constraints and derivatives, stage by stage, from
// an integrator runtime I (anvil::integrators::ExplicitRK or ImplicitRK, with the evaluations E of the ODE's functions
// it calls): the loops of the generated stage-wise functions (anvil.mpc.stagewise).
//
// S (where the stages sit): real, N, nx (the model's states, which the dynamics step), nu, np, stride, p_offset,
// lam_offset, states, source(k). The NLP's w holds stage k's x_k at k * stride and u_k at k * stride + states, its
// params p_k at p_offset + k * np (none where np = 0), its g the defects x_{k+1} - F(x_j, u_j, p_k) at rows
// lam_offset + k * states, j = source(k) the stage transition k leaves (k in a chain; its parent in a tree). With
// S::scaled, w holds [x; u] / z_scale and g the defects / row_scale (anvil.mpc.scaling): the loops step the model's
// units and scale what they write.
#ifndef ANVIL_STAGEWISE_HPP
#define ANVIL_STAGEWISE_HPP
#include <cmath>
#include <cstring>

namespace anvil {
namespace stagewise {

/// The steps x_{k+1} = F(x_k, u_k, p_k) a pass over a horizon's N stages took (a Jacobian's forward sensitivities
/// compute each as a by-product), with the inputs each was taken at: a later pass at the same inputs (the constraints
/// at the point of the last Jacobian, as a real-time iteration's feedback evaluates them) takes them instead of
/// stepping again, the same values to the bit (an explicit step computes x_next by the same operations either way).
/// Inputs match bit for bit (-0.0 is not 0.0; a NaN matches only its own bits). A workspace starts zeroed: none kept.
template <class real, int N, int nx, int nu, int np>
struct KeptSteps {
  real x[N][nx], u[N][nu > 0 ? nu : 1], p[N][np > 0 ? np : 1], x_next[N][nx];
  bool kept;  ///< every stage's entry is set

  /// Stage k's inputs (after its step was written into x_next[k]).
  void keep(int k, const real* xk, const real* uk, const real* pk) {
    std::memcpy(x[k], xk, sizeof x[k]);
    if constexpr (nu > 0) std::memcpy(u[k], uk, sizeof u[k]);
    if constexpr (np > 0) std::memcpy(p[k], pk, sizeof p[k]);
  }

  /// Stage k's kept step where its inputs are the ones it was taken at, else null.
  const real* find(int k, const real* xk, const real* uk, const real* pk) const {
    if (!kept || std::memcmp(x[k], xk, sizeof x[k]) != 0) return nullptr;
    if constexpr (nu > 0)
      if (std::memcmp(u[k], uk, sizeof u[k]) != 0) return nullptr;
    if constexpr (np > 0)
      if (std::memcmp(p[k], pk, sizeof p[k]) != 0) return nullptr;
    return x_next[k];
  }
};

/// The stage loops over the places S, stepped by I with the evaluations E (the file's comment).
template <class S, class I, class E>
struct Stages {
  using real = typename S::real;
  using Kept = KeptSteps<real, S::N, S::nx, S::nu, S::np>;
  static constexpr int N = S::N, nx = S::nx, nz = S::nx + S::nu;

  /// Stage k's parameters (null without any).
  static const real* params(const real* p, int k) { return S::np > 0 ? p + S::p_offset + k * S::np : nullptr; }

  /// The model's [x; u] of the stage at w (x: the first nx, u: from `states` on) in its units: w itself, or with
  /// S::scaled a copy in z, scaled back.
  static const real* model_z(const real* w, real (&z)[nz]) {
    if constexpr (S::scaled) {
      for (int i = 0; i < nz; ++i) z[i] = w[i < nx ? i : i - nx + S::states] * S::z_scale[i];
      return z;
    } else {
      return nullptr;
    }
  }

  /// g's defect rows -= F(x_k, u_k, p_k), each step taken from `kept` where it holds the stage's inputs (null: none),
  /// else stepped into x_next (NaN where a step failed).
  static void subtract_steps(const real* w, const real* p, real* g, typename I::Workspace& rk, real* x_next, E& eval,
                             const Kept* kept) {
    for (int k = 0; k < N; ++k) {
      const real *x = w + S::source(k) * S::stride, *pk = params(p, k);
      const real* next = kept != nullptr ? kept->find(k, x, x + S::states, pk) : nullptr;
      if (next == nullptr) {
        real z[nz];
        const real* model = model_z(x, z);
        I::step(model ? model : x, model ? model + nx : x + S::states, pk, x_next, rk, eval);
        next = x_next;
      }
      for (int i = 0; i < nx; ++i) g[S::lam_offset + k * S::states + i] -= next[i] / S::row_scale[S::scaled ? i : 0];
    }
  }

  /// The Jacobian's dynamics blocks -dF/d[x_k; u_k] (row-major, stage after stage) into jac at `to`, each step and
  /// its inputs kept in `kept` (null: none).
  static void jacobian_blocks(const real* w, const real* p, real* jac, const int* to, typename I::Workspace& rk,
                              real* x_next, real* block, E& eval, Kept* kept) {
    for (int k = 0; k < N; ++k) {
      const real *x = w + S::source(k) * S::stride, *pk = params(p, k);
      real z[nz];
      const real* model = model_z(x, z);
      I::forward(model ? model : x, model ? model + nx : x + S::states, pk, kept != nullptr ? kept->x_next[k] : x_next,
                 block, rk, eval);
      if (kept != nullptr) kept->keep(k, x, x + S::states, pk);
      for (int e = 0; e < nx * nz; ++e) {
        const real scale = S::scaled ? S::z_scale[e % nz] / S::row_scale[e / nz] : real(1);
        jac[to[k * nx * nz + e]] = -block[e] * scale;
      }
    }
    if (kept != nullptr) kept->kept = true;
  }

  /// The Lagrangian Hessian's dynamics blocks, the upper triangle of d^2(-lam_k'F)/d[x_k; u_k]^2 (row-major, stage
  /// after stage), added into hess at `to`; NaN where a step failed.
  static void hessian_blocks(const real* w, const real* p, const real* lam, real* hess, const int* to,
                             typename I::Workspace& rk, real* x_next, real* block, real* mu, E& eval) {
    for (int k = 0; k < N; ++k) {
      const real *x = w + S::source(k) * S::stride, *pk = params(p, k);
      real z[nz];
      const real* model = model_z(x, z);
      const bool stepped = I::forward(model ? model : x, model ? model + nx : x + S::states, pk, x_next, block, rk, eval);
      for (int i = 0; i < nx; ++i) mu[i] = -lam[S::lam_offset + k * S::states + i] / S::row_scale[S::scaled ? i : 0];
      for (int e = 0; e < nz * nz; ++e) block[e] = stepped ? real(0) : static_cast<real>(NAN);
      if (stepped) I::hessian(mu, pk, block, rk, eval);
      const int* at = to + k * (nz * (nz + 1) / 2);
      for (int r = 0, e = 0; r < nz; ++r)
        for (int c = r; c < nz; ++c, ++e)
          hess[at[e]] += S::scaled ? block[r * nz + c] * S::z_scale[r] * S::z_scale[c] : block[r * nz + c];
    }
  }
};

}  // namespace stagewise
}  // namespace anvil
#endif  // ANVIL_STAGEWISE_HPP
