"""Closed-loop campaigns (issue 21): every controller on every scenario, scored into one DataFrame that does not depend
on the executor (serial, the local process pool, a Ray cluster, a Dask cluster) or on the order runs complete; a run
whose plant raises or whose worker process dies is a failed row, not a lost campaign; controllers and generated
functions pickle (workers rebuild them from the shipped libraries without compiling); scenario helpers; bad arguments
named."""

from __future__ import annotations

import functools
import os
import pickle
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest

from anvil.mpc import MPCOptions, campaign, scenario_grid, scenario_lhs, simulate
from anvil.problems import cartpole_mpc as cm

pytestmark = pytest.mark.xdist_group("campaign")  # NOTE: the pool uses every core: one such test at a time
STEPS = 40
TIMES = ["solve_ms_median", "solve_ms_p95", "solve_ms_max", "wall_s"]


@pytest.fixture(scope="module")
def controllers() -> dict[str, Any]:
  """A factory and an instance (both ship to workers that are not forked)."""
  return {"sqp": functools.partial(cm.stabilizing, "camp_sqp", horizon=15),
          "rti": cm.stabilizing("camp_rti", MPCOptions(mode="rti"), horizon=15)}  # fmt: skip


@pytest.fixture(scope="module")
def scenarios() -> list[dict[str, Any]]:
  return scenario_lhs([-0.5, -0.3, 0, 0], [0.5, 0.3, 0, 0], 40, seed=1, disturbance=0.002)


@pytest.fixture(scope="module")
def reference(controllers: dict[str, Any], plant: Any, scenarios: list[dict[str, Any]]) -> pd.DataFrame:
  """The campaign run serially."""
  return campaign(controllers, plant, scenarios, STEPS, executor="serial", progress=False)


@pytest.fixture(scope="module")
def plant() -> Any:
  return cm.dynamics("camp_plant")


def test_serial_and_pool_give_the_same_frame(controllers: dict[str, Any], plant: Any, scenarios: list[dict[str, Any]],
                                             reference: pd.DataFrame, tmp_path: Any) -> None:  # fmt: skip
  serial = campaign(controllers, plant, scenarios, STEPS, executor="serial", progress=False, store=tmp_path / "s.npz")
  pd.testing.assert_frame_equal(serial.drop(columns=TIMES), reference.drop(columns=TIMES))
  pooled = campaign(controllers, plant, scenarios, STEPS, progress=False)
  assert len(serial) == 80 and list(serial["controller"][:40]) == ["sqp"] * 40
  pd.testing.assert_frame_equal(serial.drop(columns=TIMES), pooled.drop(columns=TIMES))
  assert not serial["failed"].any() and (serial["steps"] == STEPS).all()
  # a row is the run simulate gives for the scenario, its disturbance drawn from (seed, scenario index)
  s = scenarios[7]
  noise = np.random.default_rng([0, 7]).standard_normal((STEPS, 4)) * 0.002
  step = iter(range(STEPS))
  run = simulate(cm.stabilizing("camp_sqp", horizon=15), lambda x, u: np.asarray(plant(x, u)) + noise[next(step)],
                 s["x0"], STEPS)  # fmt: skip
  row = serial.iloc[7]
  assert row["cost"] == pytest.approx(run.cost, rel=1e-12) and row["x0_1"] == s["x0"][1]
  assert row["n_converged"] == run.status_counts.get("converged", 0)
  stored = np.load(tmp_path / "s.npz")
  np.testing.assert_allclose(stored["sqp/7/x"], run.x, rtol=1e-12)
  assert serial.iloc[47]["cost"] != row["cost"]  # the RTI controller's run of the same scenario is its own


def fragile(plant: Any, x: Any, u: Any, plant_p: Any) -> Any:
  """The plant, except where plant_p < 0 (its worker process dies) or > 1 (it raises)."""
  if plant_p[0] < 0:
    os._exit(3)
  if plant_p[0] > 1:
    raise RuntimeError("the plant broke")
  return plant(x, u)


def check_failed_rows(controllers: dict[str, Any], plant: Any, executor: Any) -> None:
  """One scenario's plant raises, another's kills its worker process: both are failed rows, the rest complete."""
  scenarios = [{"x0": [0.1 * i, 0, 0, 0], "plant_p": [0.5]} for i in range(6)]
  scenarios[2]["plant_p"], scenarios[4]["plant_p"] = [-1.0], [2.0]
  df = campaign(controllers, functools.partial(fragile, plant), scenarios, 10, executor=executor, progress=False)
  failed = df[df["failed"]]
  assert list(failed["scenario"]) == [2, 4, 2, 4]
  assert failed["failure"].str.contains("worker process died").tolist() == [True, False, True, False]
  assert failed["failure"].str.contains("the plant raised RuntimeError").tolist() == [False, True, False, True]
  assert (df[~df["failed"]]["steps"] == 10).all()


def test_failed_runs_are_rows(controllers: dict[str, Any], plant: Any) -> None:
  check_failed_rows(controllers, plant, None)


@pytest.mark.slow
def test_ray_cluster_gives_the_same_frame(controllers: dict[str, Any], plant: Any, scenarios: list[dict[str, Any]],
                                          reference: pd.DataFrame) -> None:  # fmt: skip
  """A local Ray cluster (two CPUs): the controllers (a factory, an instance) and the plant pickled to its worker
  processes, which find the shipped libraries; the same frame; a run whose worker dies is a failed row."""
  ray = pytest.importorskip("ray")
  import cloudpickle

  cloudpickle.register_pickle_by_value(sys.modules[__name__])  # NOTE: the workers cannot import the tests
  ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
  try:
    df = campaign(controllers, plant, scenarios, STEPS, executor=ray, progress=False)
    pd.testing.assert_frame_equal(df.drop(columns=TIMES), reference.drop(columns=TIMES))
    check_failed_rows(controllers, plant, ray)
  finally:
    ray.shutdown()


@pytest.mark.slow
def test_dask_cluster_gives_the_same_frame(controllers: dict[str, Any], plant: Any, scenarios: list[dict[str, Any]],
                                           reference: pd.DataFrame) -> None:  # fmt: skip
  distributed = pytest.importorskip("distributed")
  import cloudpickle

  cloudpickle.register_pickle_by_value(sys.modules[__name__])
  cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
  with cluster, distributed.Client(cluster) as client:
    df = campaign(controllers, plant, scenarios, STEPS, executor=client, progress=False)
  pd.testing.assert_frame_equal(df.drop(columns=TIMES), reference.drop(columns=TIMES))


def test_generated_functions_pickle_as_their_constructor_call(controllers: dict[str, Any], plant: Any) -> None:
  """An MPCFunction and a NumericalFunction round-trip through pickle (cloudpickle for the lambdas inside) and give
  the same results: rebuilt from their constructor arguments, their libraries found in the cache."""
  import cloudpickle

  mpc = controllers["rti"]
  copy_mpc, copy_plant = pickle.loads(cloudpickle.dumps((mpc, plant)))
  assert copy_mpc is not mpc and copy_mpc.name == mpc.name and copy_mpc.options == mpc.options
  x0 = np.array([0.2, 0.1, 0, 0])
  mpc.reset()
  np.testing.assert_array_equal(copy_mpc(x0).u, mpc(x0).u)
  np.testing.assert_array_equal(copy_plant(x0, np.ones(1)), plant(x0, np.ones(1)))


def test_scenario_helpers() -> None:
  grid = scenario_grid([-1, 0, 2], [1, 0, 3], [3, 2], disturbance=0.1)
  assert len(grid) == 6 and all(s["x0"][1] == 0 and s["disturbance"] == 0.1 for s in grid)
  assert sorted({s["x0"][0] for s in grid}) == [-1, 0, 1] and sorted({s["x0"][2] for s in grid}) == [2, 3]
  lhs = np.array([s["x0"] for s in scenario_lhs([-1, 5], [1, 5], 10, seed=3)])
  assert lhs.shape == (10, 2) and (lhs[:, 1] == 5).all()
  assert sorted(np.floor((lhs[:, 0] + 1) / 0.2).astype(int)) == list(range(10))  # one sample per stratum
  with pytest.raises(ValueError, match="lower <= upper"):
    scenario_grid([1], [0], 2)


def test_bad_arguments_are_named(controllers: dict[str, Any], plant: Any) -> None:
  with pytest.raises(ValueError, match=r"scenarios\[0\] must be a dict with an 'x0'"):
    campaign(controllers, plant, [{"p": 1}], 5)
  with pytest.raises(ValueError, match="unknown keys"):
    campaign(controllers, plant, [{"x0": np.zeros(4), "sensor_noise": 1}], 5)
  with pytest.raises(TypeError, match="controllers"):
    campaign({}, plant, [{"x0": np.zeros(4)}], 5)
  with pytest.raises(ValueError, match="executor"):
    campaign(controllers, plant, [{"x0": np.zeros(4)}] * 2, 5, executor="ray-ish")


def test_workers_compile_nothing_with_the_shipped_libraries(controllers: dict[str, Any], plant: Any,
                                                            tmp_path: Any) -> None:  # fmt: skip
  """What a worker on another machine gets (the pickled registry) runs the controllers and the plant from an empty
  cache without a C++ compiler: the libraries the parent built travel with it."""
  import subprocess

  import cloudpickle

  from anvil.mpc.executors import Registry

  registry = Registry(controllers, plant)
  registry.warm()
  (tmp_path / "registry.pkl").write_bytes(cloudpickle.dumps(registry))
  code = ("import pickle, sys, numpy as np; r = pickle.load(open(sys.argv[1], 'rb')); x0 = np.array([0.2, 0.1, 0, 0]); "
          "print(*r.controller('sqp')(x0).u0, *r.controller('rti')(x0).u0, *r.plant(x0, np.ones(1)))")  # fmt: skip
  env = {k: v for k, v in os.environ.items() if k != "CXX"} | {"ANVIL_CACHE_DIR": str(tmp_path / "cache"),
                                                                "PATH": str(tmp_path / "no-compiler")}  # fmt: skip
  out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "registry.pkl")], capture_output=True, text=True,
                       env=env, cwd=os.getcwd(), timeout=300)  # fmt: skip
  assert out.returncode == 0, out.stderr
  x0 = np.array([0.2, 0.1, 0, 0])
  controllers["rti"].reset()
  expected = [*cm.stabilizing("camp_sqp", horizon=15)(x0).u0, *controllers["rti"](x0).u0, *plant(x0, np.ones(1))]
  np.testing.assert_allclose(np.array(out.stdout.split(), dtype=float), expected, rtol=1e-12)


def is_png(path: Any) -> bool:
  """A PNG file matplotlib reads back as a non-empty image."""
  import matplotlib.image

  return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and matplotlib.image.imread(path).size > 0


def test_report_and_plots(reference: pd.DataFrame, controllers: dict[str, Any], plant: Any, tmp_path: Any) -> None:
  """campaign_report writes valid PNGs and a markdown table with a row per controller and the failed runs;
  plot_closed_loop draws a subplot per state or per group, an XY view, and titles an RTI run by its failed calls."""
  from anvil.mpc import campaign_report, plot_closed_loop

  df = reference.copy()
  df.loc[3, ["failed", "failure", "cost"]] = [True, "the plant raised RuntimeError: test", np.nan]
  paths = campaign_report(df, tmp_path / "report")
  assert all(is_png(paths[k]) for k in ("solve_times", "cost", "failures"))
  text = paths["report"].read_text()
  summary, failures = text.split("## Failed runs")
  table = [line for line in summary.splitlines() if line.startswith(("| sqp |", "| rti |"))]
  assert len(table) == 2 and table[0].split("|")[2].strip() == "40" and table[0].split("|")[3].strip() == "1"
  assert "| sqp | 3 | the plant raised RuntimeError: test |" in failures
  with pytest.raises(ValueError, match="lacks the columns"):
    campaign_report(df.drop(columns=["cost"]), tmp_path)
  cl = simulate(controllers["rti"], plant, np.array([0.3, 0.1, 0, 0]), 30)
  assert cl.real_time_iteration and cl.failures == 0
  out = plot_closed_loop(cl, tmp_path / "cl.png", 0.05, cm.STATE_NAMES, groups=[("xc", "xc_dot"), (1, 3)], xy=(0, 1))
  assert is_png(out)
  out = plot_closed_loop(cl, tmp_path / "each.png")
  assert is_png(out)
  from anvil.mpc.plotting import _title

  assert "real-time iteration, 0 of 30 controller calls failed" in _title(cl)
  with pytest.raises(ValueError, match="groups names a state 'speed'"):
    plot_closed_loop(cl, tmp_path / "bad.png", state_names=cm.STATE_NAMES, groups=[("speed",)])


def test_measurement_noise(controllers: dict[str, Any], plant: Any) -> None:
  """A scenario's "noise": the controller sees the state plus seeded Gaussian noise (simulate's observe), drawn after
  the disturbances from the run's stream."""
  s = {"x0": np.array([0.3, 0.1, 0, 0]), "noise": [0.0, 0.01, 0.0, 0.02], "disturbance": 0.001, "seed": 5}
  df = campaign({"sqp": controllers["sqp"]}, plant, [s], 20, executor="serial", seed=3, progress=False)
  rng = np.random.default_rng([3, 5])
  noise, measurement = rng.standard_normal((20, 4)) * 0.001, rng.standard_normal((20, 4)) * np.array(s["noise"])
  step = iter(range(20))
  seen: list[np.ndarray] = []

  def observe(t: int, x: np.ndarray) -> np.ndarray:
    seen.append(x + measurement[t])
    return seen[-1]

  run = simulate(cm.stabilizing("camp_sqp", horizon=15), lambda x, u: np.asarray(plant(x, u)) + noise[next(step)],
                 s["x0"], 20, observe=observe)  # fmt: skip
  assert df.iloc[0]["cost"] == pytest.approx(run.cost, rel=1e-12) and df.iloc[0]["noise_3"] == 0.02
  noiseless = simulate(cm.stabilizing("camp_sqp", horizon=15), lambda x, u: np.asarray(plant(x, u)), s["x0"], 20)
  assert abs(run.cost - noiseless.cost) > 1e-6  # the noise reached the controller
  with pytest.raises(TypeError, match="observe must be a callable"):
    simulate(controllers["rti"], plant, s["x0"], 2, observe=3)
