"""anvil.qp: the QP layer: one C++ contract (anvil/qp.hpp) and the solvers behind it, generated per QP structure."""

from anvil.qp.backend import QPBackend as QPBackend
from anvil.qp.backend import QPProblem as QPProblem
from anvil.qp.options import OSQPOptions as OSQPOptions
from anvil.qp.options import QPOptions as QPOptions
from anvil.qp.options import RiccatiOptions as RiccatiOptions
from anvil.qp.options import SparseIPMOptions as SparseIPMOptions
from anvil.qp.result import OCPQPSolution as OCPQPSolution
from anvil.qp.result import QPStatus as QPStatus
from anvil.qp.riccati import RiccatiQP as RiccatiQP
from anvil.qp.stages import StageLayout as StageLayout
from anvil.qp.structure import StageReport as StageReport
from anvil.qp.structure import StageSearch as StageSearch
from anvil.qp.structure import detect_stages as detect_stages
from anvil.qp.structure import search_stages as search_stages
