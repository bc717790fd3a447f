"""anvil: plain Python math (tinygrad Tensors) in, fast standalone C++ out."""

from tinygrad import Tensor as Tensor
from tinygrad import dtypes as dtypes

from anvil.codegen import Arg as Arg
from anvil.codegen import CodegenIntConstant as CodegenIntConstant
from anvil.codegen import CompileError as CompileError
from anvil.codegen import CompilerNotFoundError as CompilerNotFoundError
from anvil.codegen import CudaArray as CudaArray
from anvil.codegen import DeviceInfo as DeviceInfo
from anvil.codegen import DeviceUnavailableError as DeviceUnavailableError
from anvil.codegen import FunctionBase as FunctionBase
from anvil.codegen import GraphTooDeepError as GraphTooDeepError
from anvil.codegen import NumericalFunction as NumericalFunction
from anvil.codegen import SparseNumericalFunction as SparseNumericalFunction
from anvil.codegen import devices as devices
from anvil.codegen import generate_module as generate_module
from anvil.codegen import numerical_function as numerical_function
from anvil.codegen import sparse_numerical_function as sparse_numerical_function
from anvil.tables import Interpolant as Interpolant
from anvil.tables import interpolant as interpolant
from anvil.version import __version__ as __version__
