"""Robots as they come: a URDF's rigid-body model, and its algorithms on Tensors (kinematics, frame Jacobians, RNEA,
CRBA, ABA, centre of mass, energies, the free flyer's configuration space), generated into the controller's C++."""

from anvil.robots.model import Frame as Frame
from anvil.robots.model import FrameType as FrameType
from anvil.robots.model import Inertia as Inertia
from anvil.robots.model import Joint as Joint
from anvil.robots.model import JointType as JointType
from anvil.robots.model import Placement as Placement
from anvil.robots.robot import Robot as Robot
from anvil.robots.urdf import URDFError as URDFError
