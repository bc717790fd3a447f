"""The MPC examples run as users run them (a subprocess each) and reach what they claim; their plots are written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, out: Path, steps: int, *flags: str) -> str:
  command = [sys.executable, f"examples/{name}.py", "--out", str(out), "--steps", str(steps), *flags]
  proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
  assert proc.returncode == 0, proc.stderr
  assert (out / f"{name}.png").stat().st_size > 10_000, "the plot was not written"
  return proc.stdout


def metric(stdout: str, name: str) -> str:
  match = re.search(rf"^\s*{name}: (.+)$", stdout, re.MULTILINE)
  assert match, stdout
  return match.group(1)


@pytest.mark.slow
def test_cartpole_stabilize_reaches_the_reference_cost(tmp_path: Path) -> None:
  out = run_example("cartpole_stabilize", tmp_path, 200)
  relative = float(re.search(r"relative ([0-9.e+-]+)", out).group(1))  # type: ignore[union-attr]
  assert abs(relative) < 1e-5, out
  assert metric(out, "status_counts") == "{'converged': 200}"


@pytest.mark.slow
def test_cartpole_swingup_reaches_upright_and_stays(tmp_path: Path) -> None:
  out = run_example("cartpole_swingup", tmp_path, 80)
  assert "upright over the last second: True" in out, out
  assert float(metric(out, "max_violation")) <= 1e-6, out


@pytest.mark.slow
def test_quadrotor_tracks_the_circle(tmp_path: Path) -> None:
  out = run_example("quadrotor_tracking", tmp_path, 60)
  rms = float(re.search(r"RMS position error: ([0-9.]+) m", out).group(1))  # type: ignore[union-attr]
  # the reference moves 1.57 m/s: 2 cm RMS is less than the 3.1 cm it moves in one control step
  assert rms < 0.02, out
  assert metric(out, "status_counts") == "{'converged': 60}"


@pytest.mark.slow
def test_learned_model_controls_the_true_plant(tmp_path: Path) -> None:
  out = run_example("learned_model", tmp_path, 200)
  cost = float(re.search(r"closed-loop cost on the true plant ([0-9.]+)", out).group(1))  # type: ignore[union-attr]
  assert cost == pytest.approx(5.478384, rel=0.05), out  # close to the true-model MPC's, not equal: a fitted model
  assert metric(out, "status_counts") == "{'converged': 200}"


@pytest.mark.slow
def test_cstr_stiff_reaches_the_steady_state(tmp_path: Path) -> None:
  out = run_example("cstr_stiff", tmp_path, 30)
  error = lambda method: float(re.search(rf"{method}: ([0-9.e+-]+)", out).group(1))  # type: ignore[union-attr]
  assert error(r"RK4, 1 step\(s\)") > 1e3 and error(r"Radau IIA \(3 stages\), 1 step\(s\)") < 0.1, out
  assert error(r"Radau IIA \(3 stages\), 2 step\(s\)") < 0.05 * error(r"Radau IIA \(3 stages\), 1 step\(s\)"), out
  assert metric(out, "status_counts") == "{'converged': 30}"
  assert float(metric(out, "final distance to the steady state")) < 1e-6, out


@pytest.mark.slow
def test_race_car_on_a_track_table_equals_ipopt_and_switches_tracks(tmp_path: Path) -> None:
  """The race car's MPC on a 1500-node track table: its closed loop equals the same MPC with the table's data in p,
  IPOPT's on the same OCP, and (to the spline's error) the closed-form curvature's; a second track's data drives
  the same controller without a rebuild."""
  pytest.importorskip("casadi")
  out = run_example("race_car", tmp_path, 60, "--ipopt")
  found = re.finditer(r"max \|x_table - x\| of (.+?)\s+([0-9.e+-]+)$", out, re.MULTILINE)
  apart = {m.group(1).strip(): float(m.group(2)) for m in found}
  assert apart["table, data in p"] < 1e-8, out
  assert apart["IPOPT"] < 1e-5, out
  assert apart["closed form"] < 1e-3, out
  assert "(rebuilt: no)" in out, out
  raced = re.search(r"track 2, .*: ([0-9.]+) m raced, max \|n\| ([0-9.]+) m", out)
  assert raced and float(raced.group(1)) > 1.0 and float(raced.group(2)) <= 0.1201, out


@pytest.mark.slow
def test_arm_reach_in_mujoco_reaches_every_target(tmp_path: Path) -> None:
  """The Panda from its URDF reaches each of three end-effector targets in MuJoCo within 1 mm and 1e-2 rad, every
  solve converged, no torque beyond its limit."""
  out = run_example("arm_reach", tmp_path, 150)
  errors = re.findall(r"position error ([0-9.]+) mm, orientation error ([0-9.e+-]+) rad", out)
  assert len(errors) == 3, out
  assert all(float(p) < 1.0 and float(r) < 1e-2 for p, r in errors), out
  assert metric(out, "status_counts") == "{'converged': 150}"
  assert float(metric(out, "largest torque / its limit")) <= 1 + 1e-9, out


@pytest.mark.slow
def test_quadruped_stands_shifts_and_takes_a_push_in_mujoco(tmp_path: Path) -> None:
  """Solo12 from its URDF, contact forces as inputs, stands on MuJoCo's ground, shifts its base toward the target and
  stays up, upright, under a 20 N push of its base (every real-time iteration's QP solved: RTI's normal status)."""
  out = run_example("quadruped_stand", tmp_path, 170)
  assert metric(out, "status_counts") == "{'max_iterations': 170}", out
  low, high, tilt, x, y, _ = (float(v) for v in re.search(
    r"base height ([0-9.]+) to ([0-9.]+) m, largest tilt \(quaternion vector part\) ([0-9.]+), base at the end of the "
    r"shift \[([-0-9. ]+)\s+([-0-9.]+)\s+([-0-9.]+)\s*\] m", out).groups())  # fmt: skip
  assert 0.2 < low <= high < 0.26 and tilt < 0.05, out  # standing (0.239 m), not fallen or tipped
  assert x > 0.015 and y > 0.008, out  # most of the way to the shift (0.03, 0.02) against the posture's weight


@pytest.mark.slow
def test_arm_reach_in_cpp_against_mujoco_reaches_every_target(tmp_path: Path) -> None:
  """examples/mujoco_cpp_loop.py: the same Panda controller, exported and closing its loop in C++ on MuJoCo's C
  library, reaches each of its three targets within 1 mm, every solve converged (status 0)."""
  command = [sys.executable, "examples/mujoco_cpp_loop.py", "--out", str(tmp_path), "--steps", "150"]
  proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr
  errors = re.findall(r"target \d: position error ([0-9.]+) mm", proc.stdout)
  assert len(errors) == 3 and all(float(e) < 1.0 for e in errors), proc.stdout
  assert "statuses [150]" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_industrial_poly_robust_mpc_keeps_the_band_where_the_nominal_leaves_it(tmp_path: Path) -> None:
  """do-mpc's robust example on a plant 30% off the nominal values (its hottest scenario): the robust MPC keeps the
  reactor within its band (to 0.01 K: where the band cannot be held it says infeasible and takes the least violation),
  the nominal one leaves it by degrees."""
  out = run_example("industrial_poly", tmp_path, 60, "--perturbed")
  excursion = {label: float(value) for label, value in re.findall(r"^(\w+).*worst temperature excursion ([0-9.]+) K",
                                                                   out, re.MULTILINE)}  # fmt: skip
  assert excursion["robust"] < 0.01 and excursion["nominal"] > 2.0, out


@pytest.mark.slow
def test_batch_bioreactor_makes_do_mpcs_product(tmp_path: Path) -> None:
  """do-mpc's batch bioreactor over its 150 samples: every solve converges and the batch ends at do-mpc 5.1.2's
  product, 1.682 mol/l (`python -m benchmarks.bench_dompc --problem batch_bioreactor`), within the bounds."""
  out = run_example("batch_bioreactor", tmp_path, 150)
  assert metric(out, "status_counts") == "{'converged': 150}"
  product, excess = re.search(r"product at the end ([0-9.]+) mol/l, worst excess over the X_s and P_s limits "
                              r"([0-9.e+-]+)", out).groups()  # type: ignore[union-attr]  # fmt: skip
  assert abs(float(product) - 1.682) < 5e-4 and float(excess) < 1e-4, out
