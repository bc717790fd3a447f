"""Write the P2 cart-pole MPC of cartpole_stabilize.py as a standalone C++ module with the closed-loop program of
`anvil.mpc.harness` (closed_loop.cpp; examples/cpp/README.md says how to build and run it).

  .venv/bin/python examples/cartpole_cpp.py [out_dir] [--build]

writes out_dir (default build/cpp): cartpole_controller.hpp/.cpp (the controller, its SQP solver, the dynamics
cartpole_mpc_F and the stage cost cartpole_mpc_l), OSQP's C sources under osqp/, closed_loop_config.hpp and
closed_loop.cpp; with --build it also compiles out_dir/closed_loop (C++ with find_compiler(), C with cc, -O3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anvil.mpc.harness import build_harness, write_module

from cartpole_stabilize import X0, controller

MODULE = "cartpole_controller"


def main(argv: list[str] | None = None) -> int:
  """Generate (and with --build, compile) the cart-pole closed-loop example."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("out_dir", nargs="?", default="build/cpp", help="folder to write into (default build/cpp)")
  ap.add_argument("--build", action="store_true", help="also compile the closed_loop executable")
  args = ap.parse_args(argv)
  mpc = controller("cartpole_mpc")
  out = Path(args.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  if args.build:
    print(f"built {build_harness(mpc, out, module=MODULE, x0=X0)}")
  else:
    print(f"wrote {write_module(mpc, out, module=MODULE, x0=X0).parent}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
