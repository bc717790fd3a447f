"""anvil.ad: derivatives and batching as functions: each transform returns a new NumericalFunction."""

from anvil.ad.batching import VmapError as VmapError
from anvil.ad.sparse import constant_jacobian as constant_jacobian
from anvil.ad.sparse import sphessian as sphessian
from anvil.ad.sparse import spjacobian as spjacobian
from anvil.ad.sparsity import SparsityError as SparsityError
from anvil.ad.transforms import gauss_newton as gauss_newton
from anvil.ad.transforms import gradient as gradient
from anvil.ad.transforms import hessian as hessian
from anvil.ad.transforms import jacobian as jacobian
from anvil.ad.transforms import jvp as jvp
from anvil.ad.transforms import vjp as vjp
from anvil.ad.transforms import vmap as vmap
