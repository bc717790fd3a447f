"""do-mpc's batch bioreactor example (`examples/batch_reactor` of do-mpc 5.1): a fed-batch fermenter of 4 states and 1
input, written once (`ode`) for anvil (tinygrad), the plant (numpy, scipy's Radau) and the reference (CasADi).

States x = [X_s, S_s, P_s, V_s] (biomass, substrate and product concentrations, mol/l; volume, m^3), input u = [inp]
(the feed, m^3/h), parameters p = [Y_x, S_in] (the biomass yield and the feed's substrate concentration). Monod
growth with substrate inhibition.

The MPC as do-mpc ships it (`template_mpc.py`): N = 20 samples of 1 h, maximize the product (stage and terminal cost
-P_s), an input-rate penalty of 1, X_s <= 3.7, S_s >= -0.01, P_s <= 3 and 0 <= inp <= 0.2; nominal (do-mpc's
n_robust = 0 takes the first of its uncertainty values, Y_x = 0.5 and S_in = 200, the plant's). do-mpc discretizes
each sample by collocation on 2 Radau points in 2 finite elements; anvil by two Radau IIA steps of 2 stages (`irk`):
the same equations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil import Arg, NumericalFunction
from anvil.mpc import MPCFunction, MPCOptions, irk
from anvil.problems.backend import NUMPY, TINYGRAD, Backend, radau_step

F64 = NDArray[np.float64]

NX, NU, NP = 4, 1, 2
DT, HORIZON, STEPS = 1.0, 20, 150
STATE_NAMES = ("X_s", "S_s", "P_s", "V_s")
INPUT_NAMES = ("inp",)
#: The plant's parameters (Y_x, S_in), the first of do-mpc's uncertainty values (the ones its nominal MPC takes).
P_TRUE = np.array([0.5, 200.0])
#: do-mpc's main.py start.
X0 = np.array([1.0, 0.5, 0.0, 120.0])
R_TERM = 1.0
MU_M, K_M, K_I, V_PAR, Y_P = 0.02, 0.05, 5.0, 0.004, 1.2


def ode(x: Any, u: Any, p: Any, b: Backend) -> Any:
  """The fermenter's dynamics dx/dt (per hour), do-mpc's template_model.py term by term."""
  X_s, S_s, P_s, V_s = x[0], x[1], x[2], x[3]
  inp, Y_x, S_in = u[0], p[0], p[1]
  mu_S = MU_M * S_s / (K_M + S_s + (S_s * S_s / K_I))
  return b.stack(mu_S * X_s - inp / V_s * X_s, -mu_S * X_s / Y_x - V_PAR * X_s / Y_P + inp / V_s * (S_in - S_s),
                 V_PAR * X_s - inp / V_s * P_s, inp)  # fmt: skip


def bounds() -> tuple[tuple[F64, F64], tuple[F64, F64]]:
  """(x_bounds, u_bounds) of do-mpc's template_mpc.py."""
  inf = np.inf
  return (np.array([0.0, -0.01, 0.0, 0.0]), np.array([3.7, inf, 3.0, inf])), (np.array([0.0]), np.array([0.2]))


def nominal_mpc(name: str = "batch_bioreactor", options: MPCOptions | None = None) -> MPCFunction:
  """The MPC of do-mpc's example as shipped: nominal, at the plant's parameters (p, fixed per call)."""
  x_bounds, u_bounds = bounds()
  product = lambda x, *rest: -x[2].reshape(1)
  stage = NumericalFunction(f"{name}_l", product, (Arg(NX), Arg(NU), Arg(NP)))
  final = NumericalFunction(f"{name}_lN", product, (Arg(NX), Arg(NP)))
  F = irk(f"{name}_F", lambda x, u, p: ode(x, u, p, TINYGRAD), DT, nx=NX, nu=NU, np=NP, stages=2, steps=2)
  return MPCFunction(name, F, stage, final, horizon=HORIZON, x_bounds=x_bounds, u_bounds=u_bounds,
                     u_rate_weight=np.array([[R_TERM]]), options=options)  # fmt: skip


def plant_step(x: F64, u: F64, p: F64 = P_TRUE) -> F64:
  """The plant: one sample of the model at `p` (scipy's Radau, rtol 1e-10, as do-mpc's simulator's tolerance)."""
  return radau_step(lambda z: ode(z, u, p, NUMPY), x, DT)
