"""anvil.codegen: trace tinygrad math, render C++ or CUDA/Metal kernels, compile it, call it; emit modules."""

from anvil.codegen.arg import Arg as Arg
from anvil.codegen.base import FunctionBase as FunctionBase
from anvil.codegen.build import STAGE_COUNTS as STAGE_COUNTS
from anvil.codegen.constant import CodegenIntConstant as CodegenIntConstant
from anvil.codegen.decorator import numerical_function as numerical_function
from anvil.codegen.devices import DeviceInfo as DeviceInfo
from anvil.codegen.devices import DeviceUnavailableError as DeviceUnavailableError
from anvil.codegen.devices import devices as devices
from anvil.codegen.function import NumericalFunction as NumericalFunction
from anvil.codegen.gpu_caller import CudaArray as CudaArray
from anvil.codegen.jit import CompileError as CompileError
from anvil.codegen.jit import CompilerNotFoundError as CompilerNotFoundError
from anvil.codegen.jit import find_c_compiler as find_c_compiler
from anvil.codegen.jit import find_compiler as find_compiler
from anvil.codegen.module import generate_module as generate_module
from anvil.codegen.native import NativeHandle as NativeHandle
from anvil.codegen.sparse import SparseNumericalFunction as SparseNumericalFunction
from anvil.codegen.sparse import sparse_numerical_function as sparse_numerical_function
from anvil.codegen.trace import GraphTooDeepError as GraphTooDeepError
