// Times Pinocchio's C++ rigid-body algorithms on a URDF model (benchmarks/pinocchio_driver.py builds and runs it,
// against the headers and libraries of the pip wheel `pin`, header-only: the algorithms are compiled here, with this
// file's flags, not taken from libpinocchio_default's explicit instantiations; the model is parsed by
// libpinocchio_parsers, so this file must be compiled with the wheel's Eigen ABI: see pinocchio_driver.py).
//
// Usage: driver <urdf> [--free-flyer] [--lock name,name,...] [--calls N] [--repeats R]
//   --free-flyer  a JointModelFreeFlyer root joint (as example-robot-data's loaders add for legged robots)
//   --lock        joints held at their neutral value (pinocchio::buildReducedModel), e.g. a gripper's fingers
// Each algorithm runs R repeats of N calls, round robin between the algorithms, after one untimed repeat; the inputs
// cycle through a pool of POOL random draws (q from randomConfiguration within the position limits, the free flyer's
// translation and any other unbounded coordinate given finite bounds, [-1, 1] where both are missing; v, tau, a
// uniform in [-1, 1]; fixed seed).
// Prints `model <nq> <nv> <njoints>`, then one line per algorithm `<name> <min_us> <median_us>` (microseconds per
// call: the min and the median over the repeats of the repeat's time / N), then `checksum <value>`: a sum over the
// outputs of every call, which keeps them live.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pinocchio/algorithm/aba-derivatives.hpp"
#include "pinocchio/algorithm/aba.hpp"
#include "pinocchio/algorithm/crba.hpp"
#include "pinocchio/algorithm/joint-configuration.hpp"
#include "pinocchio/algorithm/model.hpp"
#include "pinocchio/algorithm/rnea.hpp"
#include "pinocchio/multibody.hpp"
#include "pinocchio/parsers/urdf.hpp"

namespace {

constexpr unsigned SEED = 20240611u;
constexpr int POOL = 16;

struct Options {
  std::string urdf;
  bool free_flyer = false;
  std::vector<std::string> locked;
  long calls = 2000;
  int repeats = 5;
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr, "error: %s\nusage: driver <urdf> [--free-flyer] [--lock a,b] [--calls N] [--repeats R]\n", why);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--free-flyer") {
      opt.free_flyer = true;
    } else if (arg == "--lock") {
      std::stringstream names(value());
      for (std::string name; std::getline(names, name, ',');)
        if (!name.empty()) opt.locked.push_back(name);
    } else if (arg == "--calls") {
      opt.calls = std::atol(value().c_str());
    } else if (arg == "--repeats") {
      opt.repeats = std::atoi(value().c_str());
    } else if (!arg.empty() && arg[0] == '-') {
      usage(("unknown option " + arg).c_str());
    } else if (opt.urdf.empty()) {
      opt.urdf = arg;
    } else {
      usage(("unexpected argument " + arg).c_str());
    }
  }
  if (opt.urdf.empty()) usage("no URDF path");
  if (opt.calls < 1 || opt.repeats < 1) usage("--calls and --repeats must be positive");
  return opt;
}

pinocchio::Model build(const Options &opt) {
  pinocchio::Model full;
  if (opt.free_flyer)
    pinocchio::urdf::buildModel(opt.urdf, pinocchio::JointModelFreeFlyer(), full);
  else
    pinocchio::urdf::buildModel(opt.urdf, full);
  if (opt.locked.empty()) return full;
  std::vector<pinocchio::JointIndex> ids;
  for (const std::string &name : opt.locked) {
    if (!full.existJointName(name)) {
      std::string known;
      for (pinocchio::JointIndex j = 1; j < static_cast<pinocchio::JointIndex>(full.njoints); ++j)
        known += (j > 1 ? ", " : "") + full.names[j];
      throw std::invalid_argument("no joint named " + name + " to lock; the model's joints: " + known);
    }
    ids.push_back(full.getJointId(name));
  }
  const Eigen::VectorXd q0 = pinocchio::neutral(full);
  return pinocchio::buildReducedModel(full, ids, q0);
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

}  // namespace

int main(int argc, char **argv) try {
  const Options opt = parse(argc, argv);
  const pinocchio::Model model = build(opt);
  pinocchio::Data data(model);

  std::srand(SEED);  // randomConfiguration and Eigen's Random both draw from std::rand
  // Pinocchio 4 gives a free flyer's translation the limits -+DBL_MAX (whose span overflows: randomConfiguration
  // would draw inf); such a limit (or an infinite one) becomes the other limit -+ 2, or -+1 when both are.
  auto usable = [](double x) { return std::isfinite(x) && std::abs(x) < 1e10; };
  Eigen::VectorXd lower = model.lowerPositionLimit, upper = model.upperPositionLimit;
  for (Eigen::Index i = 0; i < model.nq; ++i) {
    const bool lo = usable(lower[i]), hi = usable(upper[i]);
    if (!lo) lower[i] = hi ? upper[i] - 2.0 : -1.0;
    if (!hi) upper[i] = lo ? lower[i] + 2.0 : 1.0;
  }
  std::vector<Eigen::VectorXd> qs, vs, taus, as;
  for (int k = 0; k < POOL; ++k) {
    qs.push_back(pinocchio::randomConfiguration(model, lower, upper));
    vs.push_back(Eigen::VectorXd::Random(model.nv));
    taus.push_back(Eigen::VectorXd::Random(model.nv));
    as.push_back(Eigen::VectorXd::Random(model.nv));
  }

  double checksum = 0.0;
  const Eigen::Index nv = model.nv;
  // The algorithms, in the order of `run`'s cases.
  const std::vector<std::string> names = {"aba", "aba_derivatives", "rnea", "crba"};

  // `calls` calls of one algorithm; each adds one output entry (a different one from call to call) to the sum.
  auto run = [&](size_t which, long calls) {
    double acc = 0.0;
    switch (which) {
    case 0:
      for (long k = 0; k < calls; ++k) {
        const int p = static_cast<int>(k % POOL);
        acc += pinocchio::aba(model, data, qs[p], vs[p], taus[p])[k % nv];
      }
      break;
    case 1:
      for (long k = 0; k < calls; ++k) {
        const int p = static_cast<int>(k % POOL);
        pinocchio::computeABADerivatives(model, data, qs[p], vs[p], taus[p]);
        acc += data.ddq_dq(k % nv, (k / nv) % nv) + data.ddq_dv(k % nv, 0) + data.Minv(0, k % nv);
      }
      break;
    case 2:
      for (long k = 0; k < calls; ++k) {
        const int p = static_cast<int>(k % POOL);
        acc += pinocchio::rnea(model, data, qs[p], vs[p], as[p])[k % nv];
      }
      break;
    default:
      for (long k = 0; k < calls; ++k) {
        const int p = static_cast<int>(k % POOL);
        acc += pinocchio::crba(model, data, qs[p])(0, k % nv);
      }
      break;
    }
    return acc;
  };

  for (size_t j = 0; j < names.size(); ++j) checksum += run(j, opt.calls);  // the untimed warm-up repeat

  std::vector<std::vector<double>> us(names.size());
  for (int r = 0; r < opt.repeats; ++r) {
    for (size_t j = 0; j < names.size(); ++j) {
      const auto t0 = std::chrono::steady_clock::now();
      checksum += run(j, opt.calls);
      const auto t1 = std::chrono::steady_clock::now();
      us[j].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(opt.calls));
    }
  }

  std::printf("model %d %d %d\n", model.nq, model.nv, static_cast<int>(model.njoints));
  for (size_t j = 0; j < names.size(); ++j)
    std::printf("%s %.6g %.6g\n", names[j].c_str(), *std::min_element(us[j].begin(), us[j].end()), median(us[j]));
  std::printf("checksum %.17g\n", checksum);
  return 0;
} catch (const std::exception &e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
