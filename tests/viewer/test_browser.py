"""The report of a real 2-step run (the session's ``multi_env_run``, tests/conftest.py) in
headless chromium: the curves render, a filter narrows the trajectory list, a trajectory opens
with its turns, group and tokens, and the page raises no JavaScript error. Skipped (with the
reason) where chromium or selenium is missing; CI installs both (scripts/install_cpu.sh --test)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from viewer_browser import chromium, js_errors, unavailable_reason

from roll.cli import main as roll_main
from roll.viewer.run_data import load_run

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))]


def open_report(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())
    assert driver.execute_script("return document.body.getAttribute('data-ready');") == "1", js_errors(driver)


def rows(driver) -> list:
    return driver.find_elements("css selector", "#traj-list tr.row")


def test_report_of_a_real_run_in_chromium(multi_env_run, tmp_path):
    from selenium.webdriver.support.ui import Select

    report = tmp_path / "report.html"
    assert roll_main(["view", str(multi_env_run), "--out", str(report)]) == 0
    data = load_run(multi_env_run)
    records = data.trajectories
    assert {r["env_tag"] for r in records} == {"SimpleSokoban", "FrozenLake"}
    with chromium() as d:
        open_report(d, report)
        # ---- curves: SVG charts with drawn data
        charts = d.find_elements("css selector", ".chart svg")
        assert len(charts) >= 6
        panels = {c.get_attribute("data-panel") for c in d.find_elements("css selector", ".chart")}
        assert {"success", "return", "length", "invalid", "kl", "timing"} <= panels
        success = d.find_element("css selector", '.chart[data-panel="success"] svg')
        n_series = int(success.get_attribute("data-series"))
        assert n_series == 5  # 2 training tags + 3 validation tags
        paths = success.find_elements("css selector", "path.series")
        assert len(paths) == n_series
        train = [p for p in paths if p.get_attribute("data-key") == "env/FrozenLake/success"]
        assert train and re.fullmatch(r"M[\d.]+ [\d.]+ L[\d.]+ [\d.]+", train[0].get_attribute("d"))  # steps 1, 2
        assert len(success.find_elements("css selector", "circle")) == int(success.get_attribute("data-points"))
        # untick a tag: its series leave every chart
        d.find_element("css selector", '.tag-filter input[data-name="FrozenLake"]').click()
        success = d.find_element("css selector", '.chart[data-panel="success"] svg')
        assert int(success.get_attribute("data-series")) == n_series - 2  # FrozenLake train and val
        # ---- trajectory browser: a filter narrows the list
        total = len(rows(d))
        assert total == len(records)
        Select(d.find_element("id", "filter-tag")).select_by_value("FrozenLake")
        lake = rows(d)
        assert 0 < len(lake) < total
        assert {r.find_elements("css selector", "td")[1].text for r in lake} == {"FrozenLake"}
        Select(d.find_element("id", "filter-step")).select_by_value("2")
        lake2 = rows(d)
        assert 0 < len(lake2) < len(lake)
        # ---- open a trajectory
        lake2[-1].click()
        index = int(d.find_element("id", "traj-detail").get_attribute("data-index"))
        rec = records[index]
        assert rec["env_tag"] == "FrozenLake" and rec["step"] == 2
        assert d.find_element("id", "traj-title").text == rec["id"]
        turns = d.find_elements("css selector", "#turns-table tr.turn")
        assert len(turns) == rec["num_turns"] == len(rec["turns"])
        first = turns[0].find_elements("css selector", "td")
        assert first[1].text.strip() == rec["turns"][0]["observation"].strip()  # observation, verbatim
        members = d.find_elements("css selector", "#group-members .member")
        assert len(members) == sum(1 for r in records if r["group_id"] == rec["group_id"] and r["step"] == 2)
        tokens = d.find_elements("css selector", "#tokens .tok")
        assert len(tokens) == len(rec["tokens"]["ids"])
        model = d.find_elements("css selector", "#tokens .tok.model")
        assert len(model) == sum(rec["tokens"]["mask"]) > 0
        by_advantage = model[0].get_attribute("style")
        assert "background" in by_advantage
        Select(d.find_element("id", "token-mode")).select_by_value("logprob")
        by_logprob = d.find_element("css selector", "#tokens .tok.model").get_attribute("style")
        assert "background" in by_logprob and by_logprob != by_advantage
        # a group member card opens that member
        members[0].click()
        assert d.find_element("id", "traj-title").text == records[
            int(d.find_element("id", "traj-detail").get_attribute("data-index"))]["id"]
        shot = tmp_path / "report.png"
        assert d.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        assert js_errors(d) == []


def test_hostile_model_text_stays_text_in_the_browser(tmp_path):
    """A model that writes markup (a script end tag, an onerror image) changes nothing on the page."""
    from test_viewer_report import EVIL, make_run

    run = make_run(tmp_path)
    assert roll_main(["view", str(run)]) == 0
    with chromium() as d:
        open_report(d, run / "report.html")
        assert d.execute_script("return window.__pwned === undefined && document.images.length === 0;")
        evil_rows = [i for i, r in enumerate(load_run(run).trajectories) if r["turns"][0]["model_text"] == EVIL]
        d.execute_script("document.querySelectorAll('#traj-list tr.row')[arguments[0]].click();", evil_rows[0])
        shown = d.find_element("css selector", "#turns-table tr.turn td.model pre").get_attribute("textContent")
        assert shown == EVIL
        assert d.execute_script("return window.__pwned === undefined && document.images.length === 0;")
        assert js_errors(d) == []


def test_a_javascript_error_is_caught(tmp_path):
    """The error hook works: a page that throws is reported (so the tests above mean something)."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>null.boom();</script></body></html>")
    with chromium() as d:
        d.get(page.as_uri())
        errors = js_errors(d)
    assert any("boom" in e or "null" in e for e in errors), errors


def test_an_old_run_with_text_dumps_opens_with_a_note(tmp_path):
    from test_viewer_report import make_run

    run = make_run(tmp_path, dumps=False)
    (run / "trajectories").mkdir()
    (run / "trajectories" / "step-000001.txt").write_text("## ep0 tag=Sok\n<answer>Up</answer>")
    assert roll_main(["view", str(run)]) == 0
    with chromium() as d:
        open_report(d, run / "report.html")
        assert "text dumps only" in d.find_element("id", "no-trajectories").text
        assert d.find_element("id", "text-dump").get_attribute("textContent") == "## ep0 tag=Sok\n<answer>Up</answer>"
        assert d.find_elements("css selector", ".chart svg path.series")  # the curves still draw
        assert js_errors(d) == []
