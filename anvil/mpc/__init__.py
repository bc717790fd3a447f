"""anvil.mpc: nonlinear MPC transcribed by multiple shooting into a generated SQP solver, and closed-loop tools."""

from anvil.mpc.campaign import campaign as campaign
from anvil.mpc.campaign import scenario_grid as scenario_grid
from anvil.mpc.campaign import scenario_lhs as scenario_lhs
from anvil.mpc.controller import MPCFunction as MPCFunction
from anvil.mpc.costs import LeastSquares as LeastSquares
from anvil.mpc.estimation import MHEFunction as MHEFunction
from anvil.mpc.implicit import irk as irk
from anvil.mpc.integrators import euler as euler
from anvil.mpc.integrators import rk4 as rk4
from anvil.mpc.mujoco_plant import MuJoCoPlant as MuJoCoPlant
from anvil.mpc.options import MPCOptions as MPCOptions
from anvil.mpc.plotting import plot_closed_loop as plot_closed_loop
from anvil.mpc.report import campaign_report as campaign_report
from anvil.mpc.result import MHEEstimate as MHEEstimate
from anvil.mpc.result import MPCSolution as MPCSolution
from anvil.mpc.scaling import AutoScaling as AutoScaling
from anvil.mpc.scaling import Scaling as Scaling
from anvil.mpc.scenarios import Scenarios as Scenarios
from anvil.mpc.simulation import ClosedLoop as ClosedLoop
from anvil.mpc.simulation import simulate as simulate
from anvil.mpc.soft import Soft as Soft
from anvil.mpc.transcription import shooting_layout as shooting_layout
