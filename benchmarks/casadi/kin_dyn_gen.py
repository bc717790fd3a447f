"""CasADi's generated C of Pinocchio's ABA and of its Jacobian in z = (q, v, tau), for benchmarks/bench_robots.py.

Run by a Python that has pip `cmeel-casadi-kin-dyn` (it pins pin 2.6.20 and its own CasADi 3.7, so it lives in a
virtual environment of its own, not anvil's):

    python kin_dyn_gen.py URDF OUT_DIR [LOCKED_JOINT,...]

writes OUT_DIR/cas_aba.c and OUT_DIR/cas_daba.c (with headers) and prints {"nq", "nv", "nnz"} as JSON.
"""

import importlib
import json
import os
import sys

# NOTE: casadi_kin_dyn first: its libcasadi is the one the CasADi module beside it was built with
kin_dyn = importlib.import_module("casadi_kin_dyn")
ca = importlib.import_module("casadi")

urdf, out = sys.argv[1], sys.argv[2]
locked = [n for n in sys.argv[3].split(",") if n] if len(sys.argv) > 3 else []
with open(urdf) as f:
  model = kin_dyn.CasadiKinDyn(f.read(), kin_dyn.CasadiKinDyn.JointType.OMIT, False, dict.fromkeys(locked, 0.0))
aba = model.aba()
q, v, tau = (ca.SX.sym(n, aba.size1_in(i)) for i, n in enumerate(("q", "v", "tau")))
z = ca.vertcat(q, v, tau)
acceleration = aba(q, v, tau)
functions = [ca.Function("cas_aba", [z], [acceleration]), ca.Function("cas_daba", [z], [ca.jacobian(acceleration, z)])]
os.chdir(out)
for fn in functions:
  fn.generate(f"{fn.name()}.c", {"with_header": True})
print(json.dumps({"nq": aba.size1_in(0), "nv": aba.size1_in(1), "nnz": functions[1].sparsity_out(0).nnz()}))
