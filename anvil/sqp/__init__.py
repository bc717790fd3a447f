"""anvil.sqp: nonlinear programs solved by a generated C++ SQP loop calling the QP layer's solvers."""

from anvil.sqp.options import SQPOptions as SQPOptions
from anvil.sqp.result import SQPResult as SQPResult
from anvil.sqp.result import SQPStatus as SQPStatus
from anvil.sqp.sensitivity import Sensitivity as Sensitivity
from anvil.sqp.solver import SQPFunction as SQPFunction
