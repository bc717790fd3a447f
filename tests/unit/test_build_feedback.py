"""Build feedback: each stage is timed on the anvil logger; long builds print progress on stderr."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

import anvil as av
from anvil.codegen import build


def test_stages_are_logged_and_counted(caplog: pytest.LogCaptureFixture, fresh_cache: object) -> None:
  before = dict(build.STAGE_COUNTS)
  with caplog.at_level(logging.INFO, logger="anvil"):
    f = av.NumericalFunction("fb_log", lambda x: x.exp() * 7, av.Arg(2))
    np.testing.assert_allclose(f(np.zeros(2)), [7.0, 7.0])
  messages = [r.getMessage() for r in caplog.records if r.name == "anvil"]
  for what in ("trace", "schedule", "render", "compile"):
    assert any(m.startswith(f"fb_log: {what} ") and m.endswith(" s") for m in messages), messages
    assert build.STAGE_COUNTS[what] == before.get(what, 0) + 1


def test_long_builds_show_progress(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(build, "PROGRESS_AFTER_S", 0.05)
  with build.stage("fb_slow", "render") as progress:
    progress.update("kernel 3/9")
    time.sleep(0.3)
  err = capfd.readouterr().err
  assert "anvil: building fb_slow: render kernel 3/9" in err and "anvil: building fb_slow: render done" in err


def test_short_builds_stay_quiet(capfd: pytest.CaptureFixture[str]) -> None:
  with build.stage("fb_fast", "trace"):
    pass
  assert "anvil: building" not in capfd.readouterr().err
