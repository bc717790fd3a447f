"""Write the P2 cart-pole MPC as a standalone C++ module for examples/cpp/closed_loop.cpp (see README.md there).

  .venv/bin/python examples/cpp/generate.py [out_dir] [--build]

writes out_dir (default build/cpp): cartpole_controller.hpp/.cpp (the controller, its SQP solver, the dynamics
cartpole_mpc_F and the stage cost cartpole_mpc_l), OSQP's C sources under osqp/, and closed_loop_config.hpp; with
--build it also compiles out_dir/closed_loop (C++ with find_compiler(), C with cc, -O3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anvil.problems import cartpole_mpc as cm

from harness import build_harness, write_module

ROOT = Path(__file__).resolve().parents[2]

MODULE = "cartpole_controller"


def main(argv: list[str] | None = None) -> int:
  """Generate (and with --build, compile) the cart-pole closed-loop example."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("out_dir", nargs="?", default="build/cpp", help="folder to write into (default build/cpp)")
  ap.add_argument("--build", action="store_true", help="also compile the closed_loop executable")
  args = ap.parse_args(argv)
  mpc = cm.stabilizing("cartpole_mpc")
  out = Path(args.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  if args.build:
    print(f"built {build_harness(mpc, out, module=MODULE, x0=cm.X0_STABILIZE)}")
  else:
    print(f"wrote {write_module(mpc, out, module=MODULE, x0=cm.X0_STABILIZE).parent}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
