"""Robot.from_urdf without a compiler: the tree built from URDF text (fixed joints merged, locked joints frozen, a free
flyer), sizes, limits and bounds, and a clear error for each URDF anvil cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from anvil.robots import FrameType, JointType, Robot, URDFError

INERTIAL = ('<inertial><origin xyz="{com}"/><mass value="{mass}"/>'
            '<inertia ixx="{i}" ixy="0" ixz="0" iyy="{i}" iyz="0" izz="{i}"/></inertial>')  # fmt: skip


def link(name: str, mass: float = 1.0, inertia: float = 0.1, com: str = "0 0 0.1") -> str:
  return f'<link name="{name}">{INERTIAL.format(com=com, mass=mass, i=inertia)}</link>'


def joint(name: str, kind: str, parent: str, child: str, extra: str = "") -> str:
  return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
          f'<origin xyz="0 0 0.5" rpy="0 0 0"/><axis xyz="0 1 0"/>{extra}</joint>')  # fmt: skip


LIMIT = '<limit lower="-1" upper="2" effort="30" velocity="4"/><dynamics damping="0.5" friction="0.1"/>'


def arm(*, third: str = "revolute", extra: str = "") -> str:
  """base -(revolute)- l1 -(fixed)- l2 -(third)- l3 -(prismatic)- l4."""
  return f"""<robot name="arm">{link("base")}{link("l1")}{link("l2", 2.0)}{link("l3")}{link("l4", 0.5)}
    {joint("j1", "revolute", "base", "l1", LIMIT)}{joint("weld", "fixed", "l1", "l2")}
    {joint("j3", third, "l2", "l3", LIMIT + extra)}{joint("j4", "prismatic", "l3", "l4", LIMIT)}</robot>"""


def test_tree_merges_fixed_joints_and_reads_limits() -> None:
  robot = Robot.from_urdf(arm())
  assert (robot.nq, robot.nv, robot.nu) == (3, 3, 3)
  assert robot.joint_names == ("j1", "j3", "j4")
  assert [j.type for j in robot.joints] == [JointType.REVOLUTE, JointType.REVOLUTE, JointType.PRISMATIC]
  assert [j.parent for j in robot.joints] == [-1, 0, 1]
  # l2 (2 kg) welded onto l1 (1 kg): one body of 3 kg on j1; the weld's and l2's frames hang from j1
  assert robot.joints[0].inertia.mass == pytest.approx(3.0)
  assert robot.frame("weld").type is FrameType.FIXED_JOINT and robot.frame("l2").joint == 0
  np.testing.assert_allclose(robot.joints[1].placement.translation, [0, 0, 1.0])  # weld's 0.5 + j3's 0.5
  assert robot.mass == pytest.approx(4.5)  # the base is welded to the world
  (lbx, ubx), (lbu, ubu) = robot.bounds()["x_bounds"], robot.bounds()["u_bounds"]
  np.testing.assert_array_equal(lbx, [-1, -1, -1, -4, -4, -4])
  np.testing.assert_array_equal(ubx, [2, 2, 2, 4, 4, 4])
  np.testing.assert_array_equal(ubu, [30, 30, 30])
  np.testing.assert_array_equal(lbu, [-30, -30, -30])
  np.testing.assert_array_equal(robot.joints[0].damping, [0.5])
  q = robot.random_configuration(0)
  assert q.shape == (3,) and np.all(q >= -1) and np.all(q <= 2)
  np.testing.assert_array_equal(robot.neutral(), np.zeros(3))


def test_locked_joints_and_free_flyer() -> None:
  robot = Robot.from_urdf(arm(), floating_base=True, locked_joints={"j3": 0.3})
  assert robot.joint_names == ("root_joint", "j1", "j4")
  assert (robot.nq, robot.nv, robot.nu, robot.actuated) == (9, 8, 2, (6, 7))
  assert robot.frame("j3").type is FrameType.FIXED_JOINT
  np.testing.assert_array_equal(robot.neutral(), [0, 0, 0, 0, 0, 0, 1, 0, 0])
  q = robot.random_configuration(np.random.default_rng(1))
  assert np.linalg.norm(q[3:7]) == pytest.approx(1.0)
  lbx, ubx = robot.bounds()["x_bounds"]
  assert np.isinf(lbx[:3]).all() and np.isinf(ubx[robot.nq : robot.nq + 6]).all()


def test_continuous_joint_is_a_circle() -> None:
  robot = Robot.from_urdf(arm(third="continuous"))
  assert (robot.nq, robot.nv) == (4, 3)
  np.testing.assert_array_equal(robot.neutral(), [0, 1, 0, 0])
  q = robot.random_configuration(3)
  assert q[1] ** 2 + q[2] ** 2 == pytest.approx(1.0)


@pytest.mark.parametrize(
  ("urdf", "kwargs", "message"),
  [
    (arm(third="planar"), {}, r"joint 'j3': type 'planar' is not supported \(lock it or remove it\)"),
    (arm(third="floating"), {}, "ask for a free-flyer root with floating_base=True"),
    (arm(extra='<mimic joint="j1"/>'), {}, "joint 'j3' mimics 'j1'.*lock it"),
    (arm().replace('<link name="l3"><inertial><origin xyz="0 0 0.1"/><mass value="1.0"/><inertia ixx="0.1"',
                   '<link name="l3"><inertial><origin xyz="0 0 0.1"/><mass value="1.0"/><inertia ixx="-0.1"'),
     {}, "link 'l3': its inertia matrix .* is not positive semi-definite"),
    (arm().replace('<mass value="0.5"/>', '<mass value="-0.5"/>'), {}, "link 'l4': mass -0.5"),
    (arm(), {"locked_joints": ["elbow"]}, "locked_joints: no joint named 'elbow'"),
    (arm(), {"locked_joints": ["weld"]}, "only movable joints can be locked"),
    (arm(), {"locked_joints": {"j1": float("nan")}}, "finite"),
    (arm(), {"package_dirs": ["/no/such/folder"]}, "package_dirs"),
    ("<robot name='x'><link name='a'/><link name='b'/></robot>", {}, "exactly one root link"),
    ("/no/such/robot.urdf", {}, "neither a URDF file nor URDF XML text"),
    ("<robot name='x'><link name='a'>", {}, "not a valid URDF"),
  ],
)  # fmt: skip
def test_bad_urdf_is_named(urdf: str, kwargs: dict[str, object], message: str) -> None:
  with pytest.raises(URDFError, match=message):
    Robot.from_urdf(urdf, **kwargs)  # type: ignore[arg-type]
  assert issubclass(URDFError, ValueError)


def test_mimic_joint_locked_is_fine() -> None:
  robot = Robot.from_urdf(arm(extra='<mimic joint="j1"/>'), locked_joints=["j3"])
  assert robot.joint_names == ("j1", "j4")


def test_unknown_frame_and_reference_are_named() -> None:
  robot = Robot.from_urdf(arm())
  with pytest.raises(ValueError, match=r"no frame named 'l9' \(did you mean"):
    robot.frame("l9")
  with pytest.raises(ValueError, match="frame: index 99"):
    robot.frame(99)
  with pytest.raises(ValueError, match="reference: expected one of"):
    robot.frame_jacobian(robot.neutral(), "l4", reference="global")  # type: ignore[arg-type]


def test_a_single_link_has_no_coordinates() -> None:
  robot = Robot.from_urdf(f'<robot name="block">{link("base", 3.0)}</robot>')
  assert (robot.nq, robot.nv, robot.nu, robot.joint_names) == (0, 0, 0, ())
  assert robot.neutral().shape == (0,) and robot.frame("base").joint == -1
  floating = Robot.from_urdf(f'<robot name="block">{link("base", 3.0)}</robot>', floating_base=True)
  assert (floating.nq, floating.nv, floating.nu, floating.mass) == (7, 6, 0, 3.0)
