// Closed loop of a generated anvil MPC in plain C++ (no Python): how a robot uses the controller.
//
//   closed_loop [steps] [x0_1 ... x0_nx] [--csv path]      (defaults: 200 steps, the x0 of closed_loop_config.hpp;
//                                                          the CSV path may also come from $ANVIL_CSV)
//
// Each step measures the state, calls the controller, applies u[0] to the plant (the generated dynamics function)
// and adds the stage cost l(x_t, u_t). closed_loop_config.hpp, written by anvil.mpc.harness (write_module), includes the
// generated module and names the controller (ANVIL_MPC), the plant (ANVIL_PLANT) and the stage cost
// (ANVIL_STAGE_COST); it also holds the default bounds, the parameter p and the default x0.
//
// CSV: header "t,x0,...,u0,...,solve_time,status,iterations", one row per step (solve_time in seconds, wall clock
// around call()), then a last row t = steps with the final state (u and solve_time nan, no status).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "closed_loop_config.hpp"

#define ANVIL_STR_(x) #x
#define ANVIL_STR(x) ANVIL_STR_(x)

namespace mpc = ANVIL_MPC;
namespace plant = ANVIL_PLANT;
namespace stage_cost = ANVIL_STAGE_COST;
namespace cfg = closed_loop_config;

namespace {
constexpr int nx = mpc::nx;
constexpr int nu = mpc::nu;
const char* const status_names[] = {"converged", "max_iterations", "infeasible", "numerical_error"};

const char* status_name(int status) { return status >= 0 && status < 4 ? status_names[status] : "unknown"; }

/// The q-quantile (0..1) with linear interpolation between order statistics (numpy's default).
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

bool parse_double(const char* s, double& out) {
  char* end = nullptr;
  out = std::strtod(s, &end);
  return end != s && *end == '\0';
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [steps] [x0_1 ... x0_%d] [--csv path]\n", argv0, nx);
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  // *** arguments ***
  std::vector<double> numbers;
  std::string csv_path = std::getenv("ANVIL_CSV") ? std::getenv("ANVIL_CSV") : "";
  for (int i = 1; i < argc; ++i) {
    double v = 0.0;
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv_path = argv[++i];
    } else if (parse_double(argv[i], v)) {
      numbers.push_back(v);
    } else {
      return usage(argv[0]);
    }
  }
  if (numbers.size() != 0 && numbers.size() != 1 && numbers.size() != 1 + nx) return usage(argv[0]);
  const int steps = numbers.empty() ? 200 : static_cast<int>(numbers[0]);
  if (steps < 0 || (!numbers.empty() && numbers[0] != steps)) return usage(argv[0]);
  std::vector<double> x(cfg::x0.begin(), cfg::x0.end());
  if (numbers.size() == 1 + nx) std::copy(numbers.begin() + 1, numbers.end(), x.begin());

  // *** everything is allocated here, before the loop ***
  // the workspaces: plain structs prepared in place (static: no heap, and off the stack however large they are)
  static mpc::WS_t ws;
  static mpc::Stats stats;  // holds the SQP's per-iteration history
  static plant::WS_t plant_ws;
  static stage_cost::WS_t cost_ws;
  mpc::init(ws);
  plant::init(plant_ws);
  stage_cost::init(cost_ws);
  // the controller's own type (mpc::real: float for a float32 controller) for its state and predicted trajectory
  std::vector<mpc::real> x_now(nx), xs((mpc::N + 1) * nx), us(mpc::N * nu);
  std::vector<double> u(nu, 0.0), x_next(nx);
  std::vector<double> trajectory((steps + 1) * nx), inputs(steps * nu), solve_times(steps), internal_times(steps);
  std::vector<int> statuses(steps), iterations(steps);
  std::copy(x.begin(), x.end(), trajectory.begin());
  double cost = 0.0;

  // *** the loop ***
  const mpc::Bounds bounds{cfg::lbx.data(), cfg::ubx.data(), cfg::lbu.data(), cfg::ubu.data(),
                           cfg::lbh.data(), cfg::ubh.data(), cfg::lbhN.data(), cfg::ubhN.data()};
  for (int t = 0; t < steps; ++t) {
    const auto start = std::chrono::steady_clock::now();
    std::copy(x.begin(), x.end(), x_now.begin());
    const int status = mpc::call(x_now.data(), cfg::p.data(), bounds, xs.data(), us.data(), stats, ws);
    solve_times[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    internal_times[t] = stats.solve_time;
    statuses[t] = status;
    iterations[t] = stats.iterations;
    // apply u[0]; a non-finite input is not applied: the last one is held (as anvil.mpc.simulate does)
    if (std::all_of(us.begin(), us.begin() + nu, [](mpc::real v) { return std::isfinite(v); }))
      std::copy(us.begin(), us.begin() + nu, u.begin());
    double l = 0.0;
    stage_cost::OUT0_t l_out(&l);
    stage_cost::call(stage_cost::IN0_t(x.data()), stage_cost::IN1_t(u.data()), l_out, cost_ws);
    cost += l;
    plant::OUT0_t x_out(x_next.data());
    plant::call(plant::IN0_t(x.data()), plant::IN1_t(u.data()), x_out, plant_ws);
    x = x_next;
    std::copy(u.begin(), u.end(), inputs.begin() + t * nu);
    std::copy(x.begin(), x.end(), trajectory.begin() + (t + 1) * nx);
  }

  // *** report ***
  double mean_iterations = 0.0;
  int counts[5] = {0, 0, 0, 0, 0};
  for (int t = 0; t < steps; ++t) {
    mean_iterations += iterations[t] / static_cast<double>(steps);
    ++counts[statuses[t] >= 0 && statuses[t] < 4 ? statuses[t] : 4];
  }
  std::printf("closed loop: %s, %d steps from x0 = [", ANVIL_STR(ANVIL_MPC), steps);
  for (int i = 0; i < nx; ++i) std::printf(i ? ", %.17g" : "%.17g", trajectory[i]);
  std::printf("]\n");
  std::printf("solve time [ms]: median %.4f p95 %.4f max %.4f (wall clock around call())\n",
              quantile(solve_times, 0.5) * 1e3, quantile(solve_times, 0.95) * 1e3,
              quantile(solve_times, 1.0) * 1e3);
  std::printf("solve time in call() [ms]: median %.4f (Stats::solve_time)\n", quantile(internal_times, 0.5) * 1e3);
  std::printf("SQP iterations: mean %.3f\n", mean_iterations);
  std::printf("status:");
  for (int s = 0; s < 5; ++s)
    if (counts[s]) std::printf(" %s %d", s < 4 ? status_names[s] : "unknown", counts[s]);
  std::printf("\nclosed-loop cost: %.17g\n", cost);
  std::printf("final state: [");
  for (int i = 0; i < nx; ++i) std::printf(i ? ", %.6g" : "%.6g", x[i]);
  std::printf("]\n");

  // *** CSV ***
  if (csv_path.empty()) return 0;
  std::FILE* f = std::fopen(csv_path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", csv_path.c_str());
    return 1;
  }
  std::fprintf(f, "t");
  for (int i = 0; i < nx; ++i) std::fprintf(f, ",x%d", i);
  for (int i = 0; i < nu; ++i) std::fprintf(f, ",u%d", i);
  std::fprintf(f, ",solve_time,status,iterations\n");
  for (int t = 0; t <= steps; ++t) {
    std::fprintf(f, "%d", t);
    for (int i = 0; i < nx; ++i) std::fprintf(f, ",%.17g", trajectory[t * nx + i]);
    if (t < steps) {
      for (int i = 0; i < nu; ++i) std::fprintf(f, ",%.17g", inputs[t * nu + i]);
      std::fprintf(f, ",%.17g,%s,%d\n", solve_times[t], status_name(statuses[t]), iterations[t]);
    } else {
      for (int i = 0; i < nu; ++i) std::fprintf(f, ",nan");
      std::fprintf(f, ",nan,,\n");
    }
  }
  std::fclose(f);
  std::printf("csv: %s\n", csv_path.c_str());
  return 0;
}
