// anvil::mhe: moving-horizon estimation as an OCP of the MPC machinery (anvil/mpc.hpp), and its arrival cost.
//
// The estimation problem over a window of M measurement times (x_j the state at time j of the window, w_j the
// process noise, x_{j+1} = F(x_j, u_j, p_j) + w_j, y_j = h(x_j, p_j) + noise):
//
//   min  |x_0 - x_bar|^2_P + sum_{j < M-1} |w_j|^2_Q + sum_{j < M} |y_j - h(x_j, p_j)|^2_R
//
// is the OCP of N = M stages (states x, inputs v of size nx, stage parameter q) whose fixed initial state is the
// arrival cost's center x_bar: stage 0 "holds" (x_1 = x_bar + v_0, so v_0 = x_0 - x_bar is priced by P), and stage
// j >= 1 carries the model (x_{j+1} = F(x_j, u_{j-1}, p_{j-1}) + v_j, v_j = w_{j-1} priced by Q) and the measurement of
// its state (priced by R; the last one by the OCP's terminal cost). The stage parameter q = [hold, arrival, measured,
// u, y, p] switches the terms per stage, so one stage function serves every stage. A window of k < M measurements
// (the first calls) leaves its last M - k stages held and unmeasured: their noise is zero at the optimum and the
// problem is the k-measurement one.
//
// Arrival cost (the smoothed EKF update, Rao, Rawlings and Lee 2001): after a call with a full window, the next
// window begins one time later, at x_1. Its center is this solution's x_1 (the smoothed estimate) and its weight the
// EKF's information after measuring x_0 and predicting one step, linearized at this solution's x_0:
//
//   P+ = P + C'RC,  P' = (A P+^-1 A' + Q^-1)^-1,  A = dF/dx (x_0, u_0, p_0), C = dh/dx (x_0, p_0).
//
// A call whose estimate is not finite moves the center by the model instead (x_bar' = F(x_bar, u_0, p_0)), its
// weight updated at x_bar.
//
// The estimator E (generated per problem) provides: real, nx, nu, ny, np, M, nq (= 3 + nu + ny + np), nr (= 2 nx +
// ny), n_tuning; x_prior[nx], arrival_weight[nx * nx], Q[nx * nx], Q_inverse[nx * nx], R[ny * ny] (row-major);
// Workspace (member s: a State<E>); solve(x0, q, tuning, x, v, stats, ws, max_iter, tol, max_time) (the OCP's call:
// x (M + 1) x nx, v M x nx), guess(x, v, ws) and cold(ws) (the OCP's set_guess and reset), step(x, u, p, x_next, ws),
// state_jacobian(x, u, p, A, ws) (nx x nx) and measurement_jacobian(x, p, C, ws) (ny x nx), row-major.
#ifndef ANVIL_MHE_HPP
#define ANVIL_MHE_HPP
#include <cmath>

#include "anvil/dense.hpp"
#include "anvil/support.hpp"

namespace anvil {
namespace mhe {

/// The window's OCP vectors, the last solution and the arrival cost, in place.
template <class S>
struct State {
  using real = typename S::real;
  real q[(S::M + 1) * S::nq];  ///< the stage parameters
  real tuning[S::n_tuning];    ///< the OCP's stage weight blockdiag(P, Q, R), then its terminal weight R
  real x[(S::M + 1) * S::nx];  ///< the OCP's states: x_bar, then the window's
  real v[S::M * S::nx];        ///< its inputs: x_0 - x_bar, then the noise
  real center[S::nx];          ///< the arrival cost: center and weight (row-major)
  real weight[S::nx * S::nx];
  int filled;    ///< measurements in the last call's window (0: none since the last reset)
  bool primed;   ///< the arrival cost holds a value (else the build-time prior is loaded at the next call)
};

template <class E>
class Estimator {
 public:
  using real = typename E::real;
  using WS = typename E::Workspace;
  static constexpr int nx = E::nx, nu = E::nu, ny = E::ny, np = E::np, M = E::M, nq = E::nq, nr = E::nr;
  static_assert(M >= 2 && nq == 3 + nu + ny + np && nr == 2 * nx + ny, "invalid estimator sizes");

  /// Sets the arrival cost (center x_bar and weight P, nullptr: the build-time prior's) and forgets the last window.
  static void reset(const real* center, const real* weight, WS& ws) {
    auto& s = ws.s;
    for (int i = 0; i < nx; ++i) s.center[i] = center ? center[i] : E::x_prior[i];
    for (int i = 0; i < nx * nx; ++i) s.weight[i] = weight ? weight[i] : E::arrival_weight[i];
    s.filled = 0;
    s.primed = true;
    E::cold(ws);
  }

  /// The arrival cost's center and weight (row-major): the last update's, or before the first call the build-time
  /// prior's.
  static void arrival(real* center, real* weight, const WS& ws) {
    const auto& s = ws.s;
    for (int i = 0; i < nx; ++i) center[i] = s.primed ? s.center[i] : E::x_prior[i];
    for (int i = 0; i < nx * nx; ++i) weight[i] = s.primed ? s.weight[i] : E::arrival_weight[i];
  }

  /// Estimates from the window's k measurements y (k x ny, 1 <= k <= M), the k - 1 inputs u applied between them and
  /// the parameters p (k x np): writes the states x (k x nx; x_hat = the last), the noise w ((k - 1) x nx) and the
  /// OCP solve's stats; a full window (k = M) then moves the arrival cost to the next window's first time. Returns the
  /// SQP's status.
  template <class Stats>
  static int call(const real* y, const real* u, const real* p, int k, real* x, real* w, Stats& stats, WS& ws,
                  int max_iter, double tol, double max_time) {
    auto& s = ws.s;
    if (!s.primed) reset(nullptr, nullptr, ws);
    stage_parameters(y, u, p, k, s.q);
    tuning(s);
    // a full window after a full window is the last one moved by a time: the OCP's own warm start shifts by a stage;
    // else (a growing window) the last solution, unshifted, is the guess
    if (s.filled > 0 && !(k == M && s.filled == M)) E::guess(s.x, s.v, ws);
    const int status = E::solve(s.center, s.q, s.tuning, s.x, s.v, stats, ws, max_iter, tol, max_time);
    for (int j = 0; j < k; ++j)
      for (int i = 0; i < nx; ++i) x[j * nx + i] = s.x[(j + 1) * nx + i];
    for (int j = 0; j + 1 < k; ++j)
      for (int i = 0; i < nx; ++i) w[j * nx + i] = s.v[(j + 1) * nx + i];
    s.filled = k;
    if (k == M) advance(u, p, ws);
    return status;
  }

 private:
  /// q_j for the OCP's stages 0..M: stage 0 holds x_bar (arrival), stage j >= 1 steps from the window's x_{j-1}
  /// with u_{j-1} while j < k (held after), measured by y_{j-1} while j <= k.
  static void stage_parameters(const real* y, const real* u, const real* p, int k, real* q) {
    for (int j = 0; j <= M; ++j) {
      real* qj = q + j * nq;
      const int t = j == 0 ? 0 : j - 1;  // the window's time of the stage's state
      qj[0] = real(j == 0 || j >= k);
      qj[1] = real(j == 0);
      qj[2] = real(j >= 1 && j <= k);
      for (int i = 0; i < nu; ++i) qj[3 + i] = j >= 1 && j < k ? u[t * nu + i] : real(0);
      for (int i = 0; i < ny; ++i) qj[3 + nu + i] = j >= 1 && j <= k ? y[t * ny + i] : real(0);
      for (int i = 0; i < np; ++i) qj[3 + nu + ny + i] = p[(t < k ? t : k - 1) * np + i];
    }
  }

  /// The OCP's weights: blockdiag(P, Q, R) for its stages, R for its last state.
  template <class S>
  static void tuning(S& s) {
    real* W = s.tuning;
    for (int i = 0; i < nr * nr; ++i) W[i] = real(0);
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j) {
        W[i * nr + j] = s.weight[i * nx + j];
        W[(nx + i) * nr + nx + j] = E::Q[i * nx + j];
      }
    for (int i = 0; i < ny; ++i)
      for (int j = 0; j < ny; ++j) W[(2 * nx + i) * nr + 2 * nx + j] = W[nr * nr + i * ny + j] = E::R[i * ny + j];
  }

  /// The arrival cost of the next window (see the header): the smoothed update where the estimate is finite, else
  /// the center moved by the model. The weight is kept where an update is not positive definite.
  static void advance(const real* u, const real* p, WS& ws) {
    auto& s = ws.s;
    bool finite = true;
    for (int i = 0; i < 2 * nx; ++i) finite = finite && std::isfinite(s.x[nx + i]);
    real at[nx], next[nx];
    for (int i = 0; i < nx; ++i) at[i] = finite ? s.x[nx + i] : s.center[i];
    if (finite) {
      for (int i = 0; i < nx; ++i) next[i] = s.x[2 * nx + i];
    } else {
      E::step(at, u, p, next, ws);
    }
    bool ok = true;
    for (int i = 0; i < nx; ++i) ok = ok && std::isfinite(next[i]);
    if (!ok) return;
    for (int i = 0; i < nx; ++i) s.center[i] = next[i];
    real A[nx * nx], C[ny * nx];
    E::state_jacobian(at, u, p, A, ws);
    E::measurement_jacobian(at, p, C, ws);
    update_weight(A, C, s.weight);
  }

  /// P <- (A (P + C'RC)^-1 A' + Q^-1)^-1, unchanged unless both factorizations succeed and the result is finite.
  static void update_weight(const real* A, const real* C, real* P) {
    real L[nx][nx], S[nx][nx];
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j) {
        real v = P[i * nx + j];
        for (int a = 0; a < ny; ++a)
          for (int b = 0; b < ny; ++b) v += C[a * nx + i] * E::R[a * ny + b] * C[b * nx + j];
        L[i][j] = v;
      }
    if (!inverse(L, S)) return;
    // Sigma = A S A' + Q^-1
    real AS[nx][nx];
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j) {
        real v = 0;
        for (int l = 0; l < nx; ++l) v += A[i * nx + l] * S[l][j];
        AS[i][j] = v;
      }
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j) {
        real v = E::Q_inverse[i * nx + j];
        for (int l = 0; l < nx; ++l) v += AS[i][l] * A[j * nx + l];
        L[i][j] = v;
      }
    if (!inverse(L, S)) return;
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j)
        if (!std::isfinite(S[i][j])) return;
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j) P[i * nx + j] = real(0.5) * (S[i][j] + S[j][i]);
  }

  /// S = A^-1 for a symmetric positive definite A (A is overwritten by its Cholesky factor); false if it is not.
  static bool inverse(real (&A)[nx][nx], real (&S)[nx][nx]) {
    if (!anvil::dense::cholesky(A)) return false;
    for (int j = 0; j < nx; ++j) {
      real e[nx];
      for (int i = 0; i < nx; ++i) e[i] = real(i == j);
      anvil::dense::cholesky_solve(A, e);
      for (int i = 0; i < nx; ++i) S[i][j] = e[i];
    }
    return true;
  }
};

}  // namespace mhe
}  // namespace anvil
#endif  // ANVIL_MHE_HPP
