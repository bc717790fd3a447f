"""CasADi functions of Pinocchio's ABA, RNEA and a frame's forward kinematics, saved for benchmarks/bench_robot_mpc.py's
IPOPT solve (CasADi's serialization, which anvil's CasADi loads).

Run by a Python that has pip `cmeel-casadi-kin-dyn` (it pins its own Pinocchio and CasADi, so it lives in a virtual
environment of its own, not anvil's):

    python kin_dyn_save.py URDF FRAME OUT_DIR [LOCKED_JOINT,...]

writes OUT_DIR/aba.casadi ((q, v, tau) -> a), OUT_DIR/rnea.casadi ((q, v, a) -> tau) and OUT_DIR/fk.casadi
(q -> (position, rotation) of FRAME).
"""

import importlib
import os
import sys

# NOTE: casadi_kin_dyn first: its libcasadi is the one the CasADi module beside it was built with
kin_dyn = importlib.import_module("casadi_kin_dyn")
importlib.import_module("casadi")

urdf, frame, out = sys.argv[1], sys.argv[2], sys.argv[3]
locked = [n for n in sys.argv[4].split(",") if n] if len(sys.argv) > 4 else []
with open(urdf) as f:
  model = kin_dyn.CasadiKinDyn(f.read(), kin_dyn.CasadiKinDyn.JointType.OMIT, False, dict.fromkeys(locked, 0.0))
for name, fn in (("aba", model.aba()), ("rnea", model.rnea()), ("fk", model.fk(frame))):
  fn.save(os.path.join(out, f"{name}.casadi"))
