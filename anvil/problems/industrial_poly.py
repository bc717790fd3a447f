"""do-mpc's industrial polymerization example (`examples/industrial_poly` of do-mpc 5.1): a semi-batch reactor of 10
states, 3 inputs and two uncertain parameters, written once (`ode`) for anvil (tinygrad), the plant (numpy, scipy's
Radau) and the reference (CasADi).

States x = [m_W, m_A, m_P, T_R, T_S, Tout_M, T_EK, Tout_AWT, accum_monom, T_adiab] (kg of water, monomer and product;
temperatures of the reactor, its steel, the jacket's coolant, the external heat exchanger and its coolant, in K; the
monomer fed so far, kg; the adiabatic temperature, K), inputs u = [m_dot_f, T_in_M, T_in_EK] (the feed, kg/h, and the
coolants' inlet temperatures, K), uncertain parameters p = [delH_R, k_0] (the reaction's enthalpy, kJ/kg, and rate
constant). Time in hours; one sample is 50 s.

The MPC as do-mpc ships it (`template_mpc.py`, `robust_mpc`): N = 20 samples, maximize the product (stage and
terminal cost -m_P), the NLP scaled as do-mpc scales it (the masses and the monomer fed by 10, m_dot_f by 100; the
SQP then works on the scaled variables), an input-rate penalty on the scaled inputs, the
temperature bounds (the reactor's within 363.15 ± 2 K, hard in the robust MPC), the adiabatic temperature below
382.15 K, the monomer fed at most 30000 kg; robust over every combination of delH_R in 950 (1, 1.3, 0.7) and k_0 in
7 (1, 1.3, 0.7): 9 scenarios, robust horizon 1. do-mpc discretizes each sample by orthogonal collocation on 2 Radau
points (its default); anvil by one Radau IIA step of 2 stages (`irk`): the same collocation equations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil import Arg, NumericalFunction
from anvil.mpc import AutoScaling, MPCFunction, MPCOptions, Scaling, Scenarios, irk
from anvil.mpc.implicit import ImplicitIntegrator
from anvil.problems.backend import NUMPY, TINYGRAD, Backend, radau_step

F64 = NDArray[np.float64]

NX, NU, NP = 10, 3, 2
DT = 50.0 / 3600.0  # h
HORIZON = 20
STATE_NAMES = ("m_W", "m_A", "m_P", "T_R", "T_S", "Tout_M", "T_EK", "Tout_AWT", "accum_monom", "T_adiab")
INPUT_NAMES = ("m_dot_f", "T_in_M", "T_in_EK")
#: The plant's (the true) parameters: delH_R and k_0.
P_TRUE = np.array([950.0, 7.0])
#: do-mpc's uncertainty: every combination of these values (the first varying slowest).
DELH_R_VALUES = 950.0 * np.array([1.0, 1.3, 0.7])
K_0_VALUES = 7.0 * np.array([1.0, 1.3, 0.7])
T_SET, TEMP_RANGE = 363.15, 2.0
#: do-mpc's scaling of the states and inputs (the rate penalty is on the scaled inputs), and its rate factors.
X_SCALE = np.array([10.0, 10.0, 10.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0, 1.0])
U_SCALE = np.array([100.0, 1.0, 1.0])
R_TERM = np.array([0.002, 0.004, 0.002])

# constants of the model (do-mpc's template_model.py)
R_GAS, T_F, E_A, A_TANK = 8.314, 25 + 273.15, 8500.0, 65.0
K_U2, K_U1, W_WF, W_AF = 32.0, 4.0, 0.333, 0.667
M_M_KW, FM_M_KW, M_AWT_KW, FM_AWT_KW, M_AWT, FM_AWT, M_S = 5000.0, 300000.0, 1000.0, 100000.0, 200.0, 20000.0, 39000.0
C_PW, C_PS, C_PF, C_PR = 4.2, 0.47, 3.0, 5.0
K_WS, K_AS, K_PS = 17280.0, 3600.0, 360.0
ALFA, P_1 = 5 * 20e4 * 3.6, 1.0


def initial_state(delH_R: float = 950.0) -> F64:
  """do-mpc's main.py start: 10 t of water, 853 kg of monomer, 26.5 kg of product, at 90 C (35 C in the external
  loop), 300 kg fed, and the adiabatic temperature that follows."""
  x = np.array([10000.0, 853.0, 26.5, 363.15, 363.15, 363.15, 308.15, 308.15, 300.0, 0.0])
  x[9] = x[1] * delH_R / ((x[0] + x[1] + x[2]) * C_PR) + x[3]
  return x


def ode(x: Any, u: Any, p: Any, b: Backend) -> Any:
  """The reactor's dynamics dx/dt (per hour), do-mpc's template_model.py term by term."""
  m_W, m_A, m_P, T_R, T_S, Tout_M, T_EK, Tout_AWT = (x[i] for i in range(8))
  m_dot_f, T_in_M, T_in_EK = u[0], u[1], u[2]
  delH_R, k_0 = p[0], p[1]
  U_m = m_P / (m_A + m_P)
  m_ges = m_W + m_A + m_P
  k_R1 = k_0 * b.exp(-E_A / (R_GAS * T_R)) * ((K_U1 * (1 - U_m)) + (K_U2 * U_m))
  k_R2 = k_0 * b.exp(-E_A / (R_GAS * T_EK)) * ((K_U1 * (1 - U_m)) + (K_U2 * U_m))
  k_K = ((m_W / m_ges) * K_WS) + ((m_A / m_ges) * K_AS) + ((m_P / m_ges) * K_PS)
  dot_m_W = m_dot_f * W_WF
  reacting = k_R1 * (m_A - ((m_A * M_AWT) / (m_W + m_A + m_P)))
  dot_m_A = (m_dot_f * W_AF) - reacting - (P_1 * k_R2 * (m_A / m_ges) * M_AWT)
  dot_m_P = reacting + (P_1 * k_R2 * (m_A / m_ges) * M_AWT)
  dot_T_R = (1.0 / (C_PR * m_ges)) * ((m_dot_f * C_PF * (T_F - T_R)) - (k_K * A_TANK * (T_R - T_S))
                                       - (FM_AWT * C_PR * (T_R - T_EK)) + (delH_R * reacting))  # fmt: skip
  dot_T_S = 1.0 / (C_PS * M_S) * ((k_K * A_TANK * (T_R - T_S)) - (k_K * A_TANK * (T_S - Tout_M)))
  dot_Tout_M = 1.0 / (C_PW * M_M_KW) * ((FM_M_KW * C_PW * (T_in_M - Tout_M)) + (k_K * A_TANK * (T_S - Tout_M)))
  dot_T_EK = 1.0 / (C_PR * M_AWT) * ((FM_AWT * C_PR * (T_R - T_EK)) - (ALFA * (T_EK - Tout_AWT))
                                      + (P_1 * k_R2 * (m_A / m_ges) * M_AWT * delH_R))  # fmt: skip
  dot_Tout_AWT = 1.0 / (C_PW * M_AWT_KW) * ((FM_AWT_KW * C_PW * (T_in_EK - Tout_AWT)) - (ALFA * (Tout_AWT - T_EK)))
  dot_T_adiab = (delH_R / (m_ges * C_PR) * dot_m_A - (dot_m_A + dot_m_W + dot_m_P) * (m_A * delH_R / (m_ges * m_ges
                 * C_PR)) + dot_T_R)  # fmt: skip
  return b.stack(dot_m_W, dot_m_A, dot_m_P, dot_T_R, dot_T_S, dot_Tout_M, dot_T_EK, dot_Tout_AWT, m_dot_f, dot_T_adiab)


def dynamics(name: str, stages: int = 2) -> ImplicitIntegrator:
  """F(x, u, p): one Radau IIA step of one sample (the model is stiff: explicit steps diverge)."""
  return irk(name, lambda x, u, p: ode(x, u, p, TINYGRAD), DT, nx=NX, nu=NU, np=NP, stages=stages)


def bounds() -> tuple[tuple[F64, F64], tuple[F64, F64]]:
  """(x_bounds, u_bounds) of do-mpc's template_mpc.py (the reactor's temperature within T_SET ± TEMP_RANGE)."""
  inf = np.inf
  x_lo = np.array([0.0, 0.0, 26.0, T_SET - TEMP_RANGE, 298.0, 298.0, 288.0, 288.0, 0.0, -inf])
  x_hi = np.array([inf, inf, inf, T_SET + TEMP_RANGE, 400.0, 400.0, 400.0, 400.0, 30000.0, 382.15])
  return (x_lo, x_hi), (np.array([0.0, 333.15, 333.15]), np.array([3.0e4, 373.15, 373.15]))


def scenarios(robust_horizon: int = 1) -> Scenarios:
  """do-mpc's: every combination of the values of delH_R and k_0 (9 scenarios); robust_horizon 0 (do-mpc's nominal
  MPC, n_robust = 0): the first combination alone, the nominal values."""
  if robust_horizon == 0:
    return Scenarios([[DELH_R_VALUES[0], K_0_VALUES[0]]])
  return Scenarios.grid(DELH_R_VALUES, K_0_VALUES, robust_horizon=robust_horizon)


def robust_mpc(name: str = "industrial_poly", robust_horizon: int = 1, options: MPCOptions | None = None,
               stages: int = 2, scaling: Scaling | AutoScaling | None = None) -> MPCFunction:  # fmt: skip
  """The MPC of do-mpc's example as shipped: robust over `scenarios(robust_horizon)` (0: nominal), the reactor's
  temperature bounds hard, each sample one Radau IIA step of `stages` stages, scaled as do-mpc's (or by `scaling`)."""
  x_bounds, u_bounds = bounds()
  product = lambda x, *rest: -x[2].reshape(1)
  stage = NumericalFunction(f"{name}_l", product, (Arg(NX), Arg(NU), Arg(NP)))
  final = NumericalFunction(f"{name}_lN", product, (Arg(NX), Arg(NP)))
  return MPCFunction(
    name, dynamics(f"{name}_F", stages), stage, final, horizon=HORIZON, x_bounds=x_bounds, u_bounds=u_bounds,
    u_rate_weight=np.diag(R_TERM / U_SCALE**2), scenarios=scenarios(robust_horizon), options=options,
    scaling=scaling or Scaling(x=X_SCALE, u=U_SCALE),
  )  # fmt: skip


def plant_step(x: F64, u: F64, p: F64 = P_TRUE) -> F64:
  """The plant: one sample of the model at `p` (scipy's Radau, rtol 1e-10, as do-mpc's simulator's tolerance)."""
  return radau_step(lambda z: ode(z, u, p, NUMPY), x, DT)
