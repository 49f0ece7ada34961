"""The traces page in a real headless browser (Debian's chromium driven by Playwright's Python API; no browser
download): it loads from disk with every network request refused, a 50-step quickstart-shaped run's page loads in
under 2 s, the filters work, a multi-turn sample shows its tool turns, tokens colour, two steps compare.

The 50 steps are written through the trace writer from synthetic quickstart-shaped rollouts (8 prompts x 4
samples, 16 response tokens, validation of 100 prompts every 10 steps): a real 50-step quickstart takes tens of
minutes on this project's busy 2-core CPUs. ``RL_TRACES_SCREENSHOT=docs/traces.png`` also saves the screenshot there.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from rl_core_testing.tiny_model import build_tokenizer
from rl_traces.options import TracesOptions
from rl_traces.page import write_page
from rl_traces.reader import Traces
from rl_traces.synthetic import synthetic_rollouts
from rl_traces.writer import TraceWriter

CHROMIUM = os.environ.get("RL_TRACES_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
MULTI_TURN_STEP = 50

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt pins it)")
if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"no chromium at {CHROMIUM}: apt-get install chromium (.ci/run installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A quickstart-shaped run's traces: 50 steps, validation at 0, 10, ..., 50; step 50 multi-turn (tool calls)."""
    out = tmp_path_factory.mktemp("run")
    tok = build_tokenizer()
    w = TraceWriter(out / "traces", TracesOptions())
    w.on_start(0)
    for step in range(0, 51):
        if step:
            w.on_rollouts(synthetic_rollouts(step, tok, multi_turn=step == MULTI_TURN_STEP))
        if step % 10 == 0:
            w.on_rollouts(synthetic_rollouts(step, tok, phase="val", groups=100, n=1))
        w.on_step_end(step)
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data-dir
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
                                                   viewport={"width": 1500, "height": 950})
        requests: list[str] = []
        ctx.on("request", lambda req: requests.append(req.url))
        ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
        ctx.requests = requests
        yield ctx
        ctx.close()


def _open(ctx, path: Path):
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    start = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, time.perf_counter() - start, errors


def _shown(page) -> list[dict]:
    return page.eval_on_selector_all("#groups .sample", "els => els.map(e => ({reward: Number(e.dataset.reward), "
                                     "trunc: !!e.querySelector('.badge.trunc'), toolerr: !!e.querySelector('.turn.tool.error')}))")


def _set(page, selector: str, value: str) -> None:
    if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
        page.select_option(selector, value)
    else:
        page.fill(selector, value)


def test_page_loads_offline_fast_and_filters(run_dir, browser):
    html = write_page(run_dir)
    page, seconds, errors = _open(browser, html)
    assert seconds < 2.0, f"the 50-step page took {seconds:.2f} s to load"
    assert not errors, errors
    assert all(u.startswith("file:") for u in browser.requests), [u for u in browser.requests if not u.startswith("file:")]
    traces = Traces(run_dir)
    steps = page.eval_on_selector_all("#steps tbody tr", "rs => rs.map(r => Number(r.dataset.step))")
    assert steps == traces.steps("train") == list(range(1, 51))

    # step range
    _set(page, "#f-step-min", "10")
    _set(page, "#f-step-max", "12")
    assert page.eval_on_selector_all("#steps tbody tr", "rs => rs.map(r => Number(r.dataset.step))") == [10, 11, 12]
    _set(page, "#f-step-min", "")
    _set(page, "#f-step-max", "")

    # reward: the match column counts what the rows say, the step view shows only those
    page.click("#steps tbody tr[data-step='30']")
    rows = traces.read("train", 30).to_pylist()
    assert len(_shown(page)) == len(rows) == 32
    _set(page, "#f-rew-min", "1")
    shown = _shown(page)
    assert len(shown) == sum(r["reward"] >= 1 for r in rows) > 0 and all(s["reward"] >= 1 for s in shown)
    match = page.eval_on_selector("#steps tbody tr[data-step='30'] td.match", "e => Number(e.textContent)")
    assert match == len(shown)
    _set(page, "#f-rew-min", "")

    # truncated
    _set(page, "#f-trunc", "yes")
    shown = _shown(page)
    assert len(shown) == sum(r["truncated"] for r in rows) and all(s["trunc"] for s in shown)
    _set(page, "#f-trunc", "no")
    assert len(_shown(page)) == sum(not r["truncated"] for r in rows)
    _set(page, "#f-trunc", "")

    # text search: one prompt's group
    needle = rows[5]["prompt"].split("What is ")[1].split("?")[0]
    _set(page, "#f-text", f"What is {needle}?")
    groups = page.eval_on_selector_all("#groups .group", "gs => gs.map(g => g.dataset.group)")
    assert groups == sorted({r["group"] for r in rows if f"What is {needle}?" in r["prompt"]}, key=groups.index)
    assert len(groups) >= 1
    _set(page, "#f-text", "")

    # colouring by advantage: every token of a trained response coloured by its sign
    _set(page, "#f-colour", "advantage")
    styles = page.eval_on_selector_all("#groups .sample .tok", "ts => ts.map(t => t.getAttribute('style'))")
    assert styles and any("rgba(40,160,60" in s for s in styles) and any("rgba(210,50,50" in s for s in styles)
    _set(page, "#f-colour", "gap")
    assert page.eval_on_selector_all("#groups .sample .tok", "ts => ts.length") == len(styles)
    _set(page, "#f-colour", "")
    page.close()


def test_multi_turn_sample_shows_its_tool_turns(run_dir, browser):
    page, _, errors = _open(browser, write_page(run_dir))
    page.click(f"#steps tbody tr[data-step='{MULTI_TURN_STEP}']")
    rows = Traces(run_dir).read("train", MULTI_TURN_STEP).to_pylist()
    tool_turns = page.eval_on_selector_all("#groups .turn.tool", "ts => ts.map(t => t.textContent)")
    assert len(tool_turns) == len(rows) and all("calculator" in t for t in tool_turns)
    roles = page.eval_on_selector("#groups .sample", "s => [...s.querySelectorAll('.turn')].map(t => t.dataset.role)")
    assert roles[:3] == ["assistant", "tool", "assistant"]
    _set(page, "#f-toolerr", "yes")
    shown = _shown(page)
    assert len(shown) == sum(r["tool_errors"] > 0 for r in rows) > 0 and all(s["toolerr"] for s in shown)
    _set(page, "#f-toolerr", "no")
    assert len(_shown(page)) == sum(r["tool_errors"] == 0 for r in rows)
    assert not errors, errors
    page.close()


def test_same_prompt_at_two_steps_and_screenshot(run_dir, browser, tmp_path):
    page, _, errors = _open(browser, write_page(run_dir))
    _set(page, "#f-phase", "val")
    page.click("#steps tbody tr[data-step='50']")
    page.click("#groups .group:first-child button.cmp")
    options = page.eval_on_selector_all("#cmp-a option", "os => os.map(o => o.value)")
    assert options == [f"val:{s}" for s in (0, 10, 20, 30, 40, 50)]
    page.select_option("#cmp-a", "val:0")
    page.select_option("#cmp-b", "val:50")
    prompt = page.eval_on_selector("#groups .group:first-child .prompt", "e => e.textContent")
    val = Traces(run_dir)
    for col, step in (("#cmp-col-a", 0), ("#cmp-col-b", 50)):
        n = page.eval_on_selector_all(f"{col} .sample", "s => s.length")
        assert n == sum(r["prompt"] == prompt for r in val.read("val", step).to_pylist()) >= 1
    assert not errors, errors
    # the screenshot for docs/traces.md: the training view of step 50 (multi-turn), coloured by advantage
    _set(page, "#f-phase", "train")
    page.click("#steps tbody tr[data-step='49']")
    _set(page, "#f-colour", "advantage")
    shot = tmp_path / "traces.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("RL_TRACES_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["RL_TRACES_SCREENSHOT"])
    page.close()
