"""OSQP's generated workspace rewritten per instance (anvil/qp/osqp_workspace.py): every global of the wheel's file
becomes a member, every reference to one a reference to the instance's member, and text the rewrite does not know
is refused rather than dropped."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import scipy.sparse as sp

from anvil.codegen import find_c_compiler
from anvil.qp.options import OSQPOptions
from anvil.qp.osqp import INCLUDE_DIRS, EmbeddedOSQP
from anvil.qp.osqp_workspace import InstancedWorkspace

PREFIX = "unit_qp_"
WHEEL = """
/* Define the settings structure */
OSQPFloat unit_qp_sol_x[2];
OSQPFloat unit_qp_sol_y[1] = {
  (OSQPFloat)0.5,
};
OSQPFloat unit_qp_data_P_csc_x[1] = {
  (OSQPFloat)2.0,
};
OSQPFloat unit_qp_data_A_csc_x[1] = {
  (OSQPFloat)1.0,
};
OSQPVectorf unit_qp_view = {
  unit_qp_sol_x+1,
  1
};
OSQPSolver unit_qp_solver = {
  &unit_qp_settings,
  (LinSysSolver *)&unit_qp_view,
  OSQP_NULL,
};
"""


def test_globals_become_members() -> None:
  workspace = InstancedWorkspace(PREFIX, WHEEL)
  members = {v.member: v for v in workspace.variables}
  assert list(members) == ["sol_x", "sol_y", "data_P_csc_x", "data_A_csc_x", "view", "solver"]
  assert members["sol_x"].size == 2 and members["sol_x"].init is None
  assert members["view"].init == ("s->sol_x+1", "1")
  assert members["solver"].init == ("&s->settings", "(LinSysSolver *)&s->view", "OSQP_NULL")
  assert "OSQPFloat sol_x[2];" in workspace.header and f"}} {PREFIX}state;" in workspace.header
  assert "if (!keep_matrices) memcpy(s->data_P_csc_x" in workspace.definitions


def test_wheel_workspace_has_no_global_left(tmp_path: Path) -> None:
  one = sp.csc_array(sp.eye_array(2, format="csc"))
  files = EmbeddedOSQP(PREFIX, one, one, OSQPOptions()).files
  for text in (files[f"osqp/{PREFIX}workspace.c"], files[f"osqp/{PREFIX}workspace.h"]):
    names = set(re.findall(rf"\b{PREFIX}\w+", text))
    assert names <= {f"{PREFIX}state", f"{PREFIX}state_init", f"{PREFIX}workspace"}, names
  for path, text in files.items():
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(text)
  # the rewritten file is ours: C99 without a warning (OSQP's own sources are not)
  flags = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", *(f"-I{tmp_path / d}" for d in INCLUDE_DIRS)]
  cmd = [find_c_compiler(), *flags, "-c", str(tmp_path / f"osqp/{PREFIX}workspace.c"), "-o", str(tmp_path / "ws.o")]
  built = subprocess.run(cmd, capture_output=True, text=True)
  assert built.returncode == 0, built.stderr


@pytest.mark.parametrize(
  ("source", "message"),
  [
    (WHEEL + "static int unit_qp_counter(void) { return 0; }\n", "unexpected text"),
    (WHEEL + "OSQPInt other_name[1];\n", "lacks the prefix"),
    (WHEEL + "OSQPInt unit_qp_short[3] = {1, 2};\n", "2 values for 3 elements"),
    (WHEEL.replace("unit_qp_sol_y", "unit_qp_sol_z"), "lacks ['sol_y']"),
  ],
)
def test_unknown_text_is_refused(source: str, message: str) -> None:
  with pytest.raises(ValueError, match=re.escape(message)):
    _ = InstancedWorkspace(PREFIX, source).variables
