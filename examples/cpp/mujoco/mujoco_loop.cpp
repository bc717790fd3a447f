// A robot's closed loop in plain C++: a generated anvil MPC drives a MuJoCo model (no Python at run time).
//
//   mujoco_loop model.mjb out.csv
//
// model.mjb is the plant's MuJoCo model (`MuJoCoPlant.save`); mujoco_loop_config.hpp, written by
// examples/cpp/mujoco/loop.py, includes the generated module, names the controller (ANVIL_MPC) and holds the run:
// the steps, MuJoCo's steps per sample, where the state's joints sit in qpos and qvel and which degrees of freedom
// the torques drive, x0, each step's parameter and the controller's default bounds. Each sample measures x from
// qpos and qvel, calls the controller, and holds u[0] as joint torques over the sample while MuJoCo steps, exactly
// as anvil.mpc.MuJoCoPlant does (MuJoCo's data reset to the measured state first).
//
// CSV: header "t,x0,...,u0,...,solve_time,status,iterations", one row per step (solve_time in seconds, wall clock
// around call()), then a last row t = steps with the final state (u and solve_time nan, no status).
#include <mujoco/mujoco.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "mujoco_loop_config.hpp"

namespace mpc = ANVIL_MPC;
namespace cfg = mujoco_loop_config;

namespace {
constexpr int nx = mpc::nx, nu = mpc::nu, N = mpc::N, joints = nx / 2;
// the controller's workspace and its plan: static, prepared once, no allocation in the loop
mpc::WS_t ws;
mpc::real x[nx], xs[(N + 1) * nx], us[N * nu];

void row(std::FILE* csv, int t, const mpc::real* u, double seconds, int status, int iterations) {
  std::fprintf(csv, "%d", t);
  for (int i = 0; i < nx; ++i) std::fprintf(csv, ",%.17g", static_cast<double>(x[i]));
  for (int i = 0; i < nu; ++i) std::fprintf(csv, ",%.17g", u ? static_cast<double>(u[i]) : NAN);
  if (u)
    std::fprintf(csv, ",%.17g,%d,%d\n", seconds, status, iterations);
  else
    std::fprintf(csv, ",nan,,\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s model.mjb out.csv\n", argv[0]);
    return 2;
  }
  mjModel* m = mj_loadModel(argv[1], nullptr);
  if (m == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  mjData* d = mj_makeData(m);
  std::FILE* csv = std::fopen(argv[2], "w");
  if (d == nullptr || csv == nullptr) {
    std::fprintf(stderr, "cannot start (MuJoCo's data, or %s)\n", argv[2]);
    return 1;
  }
  std::fprintf(csv, "t");
  for (int i = 0; i < nx; ++i) std::fprintf(csv, ",x%d", i);
  for (int i = 0; i < nu; ++i) std::fprintf(csv, ",u%d", i);
  std::fprintf(csv, ",solve_time,status,iterations\n");
  mpc::init(ws);
  for (int i = 0; i < nx; ++i) x[i] = cfg::x0[i];
  for (int t = 0; t < cfg::steps; ++t) {
    mpc::Stats stats;
    const auto start = std::chrono::steady_clock::now();
    const int status = mpc::call(x, cfg::p.data() + t * (N + 1) * mpc::np, cfg::lbx.data(), cfg::ubx.data(),
                                 cfg::lbu.data(), cfg::ubu.data(), cfg::lbh.data(), cfg::ubh.data(), cfg::lbhN.data(),
                                 cfg::ubhN.data(), xs, us, stats, ws);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row(csv, t, us, seconds, status, stats.iterations);
    // the plant: MuJoCo from the measured state, u[0] held as joint torques over the sample
    mj_resetData(m, d);
    for (int i = 0; i < joints; ++i) {
      d->qpos[cfg::qpos[i]] = x[i];
      d->qvel[cfg::qvel[i]] = x[joints + i];
    }
    for (int i = 0; i < nu; ++i) d->qfrc_applied[cfg::torque[i]] = us[i];
    for (int s = 0; s < cfg::substeps; ++s) mj_step(m, d);
    for (int i = 0; i < joints; ++i) {
      x[i] = d->qpos[cfg::qpos[i]];
      x[joints + i] = d->qvel[cfg::qvel[i]];
    }
  }
  row(csv, cfg::steps, nullptr, 0.0, 0, 0);
  std::fclose(csv);
  mj_deleteData(d);
  mj_deleteModel(m);
  return 0;
}
