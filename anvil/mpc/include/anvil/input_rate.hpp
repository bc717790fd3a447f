// anvil::mpc::InputRate: the map between the call of a controller with input-rate terms (the model's states x, the
// previous input u_prev) and its NLP, whose stages carry the previous input as extra states (anvil.mpc.rate):
// x~_0 = [x0; u_prev], the state bounds padded with ±inf for the previous inputs (the rate rows bound them), the
// rate bounds appended to each stage's path-constraint bounds, and the plan's states cut back to the model's. The
// input the controller returns is kept as the next call's u_prev (when the caller gives none).
//
// R: real, nx (the model's states), nu, N, nh (the model's path constraints), bounded (the rate rows exist) and
// rate_lb[nu], rate_ub[nu].
#ifndef ANVIL_INPUT_RATE_HPP
#define ANVIL_INPUT_RATE_HPP
#include <cmath>

namespace anvil {
namespace mpc {

template <class R>
struct InputRate {
  using real = typename R::real;
  static constexpr int nx = R::nx, nu = R::nu, N = R::N, nh = R::nh, nxa = nx + nu;
  static constexpr int nha = nh + (R::bounded ? nu : 0);  ///< the NLP's path constraints per stage

  /// The NLP's side of a call, and the last input returned. Plain arrays: no allocation.
  struct State {
    real x0[nxa], lbx[(N + 1) * nxa], ubx[(N + 1) * nxa], x[(N + 1) * nxa], last_u[nu];
    real lbh[N * nha > 0 ? N * nha : 1], ubh[N * nha > 0 ? N * nha : 1];
  };

  /// x~_0 and the NLP's state and path-constraint bounds from a call's (u_prev: nullptr for the last input returned).
  static void expand(const real* x0, const real* u_prev, const real* lbx, const real* ubx, const real* lbh,
                     const real* ubh, State& r) {
    const real inf = static_cast<real>(HUGE_VAL);
    for (int i = 0; i < nx; ++i) r.x0[i] = x0[i];
    for (int j = 0; j < nu; ++j) r.x0[nx + j] = u_prev != nullptr ? u_prev[j] : r.last_u[j];
    for (int k = 0; k <= N; ++k) {
      for (int i = 0; i < nx; ++i) {
        r.lbx[k * nxa + i] = lbx[k * nx + i];
        r.ubx[k * nxa + i] = ubx[k * nx + i];
      }
      for (int j = 0; j < nu; ++j) {
        r.lbx[k * nxa + nx + j] = -inf;
        r.ubx[k * nxa + nx + j] = inf;
      }
    }
    for (int k = 0; k < N; ++k) {
      for (int i = 0; i < nh; ++i) {
        r.lbh[k * nha + i] = lbh[k * nh + i];
        r.ubh[k * nha + i] = ubh[k * nh + i];
      }
      for (int j = 0; j < nha - nh; ++j) {
        r.lbh[k * nha + nh + j] = R::rate_lb[j];
        r.ubh[k * nha + nh + j] = R::rate_ub[j];
      }
    }
  }

  /// The last input returned forgotten: the next call without u_prev takes zeros, as the first does.
  static void forget(State& r) {
    for (int j = 0; j < nu; ++j) r.last_u[j] = real(0);
  }

  /// The plan's states without the previous inputs (from r.x); u's first input kept as the next call's u_prev.
  static void shrink(const real* u, real* x, State& r) {
    for (int k = 0; k <= N; ++k)
      for (int i = 0; i < nx; ++i) x[k * nx + i] = r.x[k * nxa + i];
    for (int j = 0; j < nu; ++j) r.last_u[j] = u[j];
  }

  /// A guess of the model's states x and the inputs u as the NLP's states (in r.x): v_k = u_{k-1}, v_0 the last input.
  static void guess(const real* x, const real* u, State& r) {
    for (int k = 0; k <= N; ++k) {
      for (int i = 0; i < nx; ++i) r.x[k * nxa + i] = x[k * nx + i];
      for (int j = 0; j < nu; ++j) r.x[k * nxa + nx + j] = k == 0 ? r.last_u[j] : u[(k - 1) * nu + j];
    }
  }
};

}  // namespace mpc
}  // namespace anvil
#endif  // ANVIL_INPUT_RATE_HPP
