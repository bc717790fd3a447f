// A robot's closed loop in plain C++: a generated anvil MPC drives a MuJoCo model (no Python at run time).
//
//   mujoco_loop model.mjb out.csv
//
// model.mjb is the plant's MuJoCo model (`MuJoCoPlant.model`, saved); mujoco_loop_config.hpp, written by
// anvil.mpc.mujoco_loop (write), includes the generated module, names the controller (ANVIL_MPC) and holds the run:
// the steps, MuJoCo's steps per sample, where the state's joints sit in qpos and qvel (and the free joint of a
// floating base), which degrees of freedom the torques drive, x0, the controller's default bounds, the pushes (wrenches
// on bodies over ranges of steps) and each step's parameter: a table, or the generated function ANVIL_PARAMETER of
// (t, x) (a reference that depends on the state, e.g. where a quadruped's feet stand), given to every stage. Each
// sample measures x from qpos and qvel, calls the controller, and holds u[0]'s torques over the sample while MuJoCo
// steps, exactly as anvil.mpc.MuJoCoPlant does (MuJoCo's data reset to the measured state first; a free joint's
// conventions mapped: quaternion (x, y, z, w) <-> MuJoCo's (w, x, y, z), linear velocity in the base's frame <->
// MuJoCo's in the world's).
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
// where the joints' coordinates start in q and in v: after the free joint's 7 and 6, if any
constexpr int nx = mpc::nx, nu = mpc::nu, N = mpc::N, nq = cfg::nq;
constexpr int at_q = cfg::free ? 7 : 0, at_v = nq + (cfg::free ? 6 : 0);
// the controller's workspace, its plan and the parameter of every stage: static, prepared once, no allocation
mpc::WS_t ws;
mpc::real x[nx], xs[(N + 1) * nx], us[N * nu], p[(N + 1) * (mpc::np > 0 ? mpc::np : 1)];
#ifdef ANVIL_PARAMETER
namespace parameter = ANVIL_PARAMETER;
parameter::WS_t parameter_ws;
#endif

void row(std::FILE* csv, int t, const mpc::real* u, double seconds, int status, int iterations) {
  std::fprintf(csv, "%d", t);
  for (int i = 0; i < nx; ++i) std::fprintf(csv, ",%.17g", static_cast<double>(x[i]));
  for (int i = 0; i < nu; ++i) std::fprintf(csv, ",%.17g", u ? static_cast<double>(u[i]) : NAN);
  if (u)
    std::fprintf(csv, ",%.17g,%d,%d\n", seconds, status, iterations);
  else
    std::fprintf(csv, ",nan,,\n");
}

// step t's parameter, at every stage
const mpc::real* parameter_at(int t) {
#ifdef ANVIL_PARAMETER
  mpc::real time[1] = {static_cast<mpc::real>(t)};
  parameter::OUT0_t first_stage(p);
  parameter::call(parameter::IN0_t(time), parameter::IN1_t(x), first_stage, parameter_ws);
  for (int k = 1; k <= N; ++k)
    for (int i = 0; i < mpc::np; ++i) p[k * mpc::np + i] = p[i];
  return p;
#else
  return cfg::p.data() + t * (N + 1) * mpc::np;
#endif
}

// the rotation matrix of a quaternion (w, x, y, z), normalized first (as MuJoCoPlant's)
void rotation_of(mjtNum* rotation, const mjtNum* quaternion) {
  mjtNum unit[4] = {quaternion[0], quaternion[1], quaternion[2], quaternion[3]};
  mju_normalize4(unit);
  mju_quat2Mat(rotation, unit);
}

// MuJoCo's data reset to the state x (a free joint's position, quaternion and velocities mapped), u's torques and the
// pushes of step t applied
void load(const mjModel* m, mjData* d, int t) {
  mj_resetData(m, d);
  for (int i = 0; i < cfg::joints; ++i) {
    d->qpos[cfg::qpos[i]] = x[at_q + i];
    d->qvel[cfg::qvel[i]] = x[at_v + i];
  }
  if constexpr (cfg::free) {
    mjtNum* q = d->qpos + cfg::base_qpos;
    mjtNum* v = d->qvel + cfg::base_dof;
    for (int i = 0; i < 3; ++i) q[i] = x[i];
    q[3] = x[6];
    for (int i = 0; i < 3; ++i) q[4 + i] = x[3 + i];
    mjtNum rotation[9], linear[3] = {x[nq], x[nq + 1], x[nq + 2]};
    rotation_of(rotation, q + 3);
    mju_mulMatVec3(v, rotation, linear);  // the base's frame to the world's
    for (int i = 0; i < 3; ++i) v[3 + i] = x[nq + 3 + i];
  }
  for (int i = 0; i < cfg::torques; ++i) d->qfrc_applied[cfg::torque[i]] = us[i];
  for (int k = 0; k < cfg::pushes; ++k)
    if (cfg::push_first[k] <= t && t < cfg::push_end[k])
      for (int i = 0; i < 6; ++i) d->xfrc_applied[6 * cfg::push_body[k] + i] = cfg::push_wrench[6 * k + i];
}

// x read back from MuJoCo's data
void measure(const mjData* d) {
  for (int i = 0; i < cfg::joints; ++i) {
    x[at_q + i] = d->qpos[cfg::qpos[i]];
    x[at_v + i] = d->qvel[cfg::qvel[i]];
  }
  if constexpr (cfg::free) {
    const mjtNum* q = d->qpos + cfg::base_qpos;
    const mjtNum* v = d->qvel + cfg::base_dof;
    mjtNum rotation[9], linear[3];
    rotation_of(rotation, q + 3);
    mju_mulMatTVec3(linear, rotation, v);  // the world's frame to the base's
    for (int i = 0; i < 3; ++i) {
      x[i] = q[i];
      x[3 + i] = q[4 + i];
      x[nq + i] = linear[i];
      x[nq + 3 + i] = v[3 + i];
    }
    x[6] = q[3];
  }
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
#ifdef ANVIL_PARAMETER
  parameter::init(parameter_ws);
#endif
  for (int i = 0; i < nx; ++i) x[i] = cfg::x0[i];
  for (int t = 0; t < cfg::steps; ++t) {
    mpc::Stats stats;
    const auto start = std::chrono::steady_clock::now();
    const int status = mpc::call(x, parameter_at(t), cfg::lbx.data(), cfg::ubx.data(), cfg::lbu.data(),
                                 cfg::ubu.data(), cfg::lbh.data(), cfg::ubh.data(), cfg::lbhN.data(), cfg::ubhN.data(),
                                 xs, us, stats, ws);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row(csv, t, us, seconds, status, stats.iterations);
    load(m, d, t);  // the plant: MuJoCo from the measured state, u[0]'s torques held over the sample
    for (int s = 0; s < cfg::substeps; ++s) mj_step(m, d);
    measure(d);
  }
  row(csv, cfg::steps, nullptr, 0.0, 0, 0);
  std::fclose(csv);
  mj_deleteData(d);
  mj_deleteModel(m);
  return 0;
}
