// A generated MPC in closed loop on a microcontroller: every workspace static (no heap, nothing on the stack but the
// calls' frames), the plant simulated by the generated dynamics. Prints the closed-loop cost and the final state as the
// hex of their bits (exact, with no printf) through semihosting; exits 0 when every step converged. The controller
// computes in its own type (mpc::real: float for a float32 controller), the plant and the cost in double.
//
// closed_loop_config.hpp (examples/cpp/harness.py: write_module) names the controller, plant and stage cost and gives
// the bounds, the parameter and x0; ANVIL_STEPS the number of closed-loop steps.
#include <cstdint>
#include <cstring>

#include "closed_loop_config.hpp"

namespace embedded {
void write(const char* text);
}

namespace mpc = ANVIL_MPC;
namespace plant = ANVIL_PLANT;
namespace stage_cost = ANVIL_STAGE_COST;
namespace cfg = closed_loop_config;
using real = mpc::real;

namespace {
mpc::WS_t controller;  // static placement: .bss, prepared by mpc::init
mpc::Stats stats;
plant::WS_t plant_ws;
stage_cost::WS_t cost_ws;
real xs[(mpc::N + 1) * mpc::nx], us[mpc::N * mpc::nu];

/// Writes "name 0x<16 hex digits>\n" for the bits of v.
void write_bits(const char* name, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  char line[48];
  std::size_t n = 0;
  while (name[n] != '\0' && n < 24) line[n] = name[n], ++n;
  line[n++] = ' ', line[n++] = '0', line[n++] = 'x';
  for (int shift = 60; shift >= 0; shift -= 4) line[n++] = "0123456789abcdef"[(bits >> shift) & 0xF];
  line[n++] = '\n', line[n] = '\0';
  embedded::write(line);
}
}  // namespace

int main() {
  mpc::init(controller);
  plant::init(plant_ws);
  stage_cost::init(cost_ws);
  double x[mpc::nx], u[mpc::nu] = {}, x_next[mpc::nx];
  real x_now[mpc::nx];
  for (int i = 0; i < mpc::nx; ++i) x[i] = cfg::x0[i];
  double cost = 0.0;
  int failures = 0;
  for (int t = 0; t < ANVIL_STEPS; ++t) {
    for (int i = 0; i < mpc::nx; ++i) x_now[i] = static_cast<real>(x[i]);
    const int status = mpc::call(x_now, cfg::p.data(), cfg::lbx.data(), cfg::ubx.data(), cfg::lbu.data(), cfg::ubu.data(),
                                 cfg::lbh.data(), cfg::ubh.data(), cfg::lbhN.data(), cfg::ubhN.data(), xs, us, stats,
                                 controller);
    failures += status != anvil::sqp::converged;
    for (int i = 0; i < mpc::nu; ++i) u[i] = us[i];
    double l = 0.0;
    stage_cost::OUT0_t l_out(&l);
    stage_cost::call(stage_cost::IN0_t(x), stage_cost::IN1_t(u), l_out, cost_ws);
    cost += l;
    plant::OUT0_t x_out(x_next);
    plant::call(plant::IN0_t(x), plant::IN1_t(u), x_out, plant_ws);
    for (int i = 0; i < mpc::nx; ++i) x[i] = x_next[i];
  }
  write_bits("cost", cost);
  for (int i = 0; i < mpc::nx; ++i) write_bits("x", x[i]);
  embedded::write(failures ? "status: some steps did not converge\n" : "status: every step converged\n");
  return failures ? 1 : 0;
}
