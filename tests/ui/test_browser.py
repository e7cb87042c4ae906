"""The dashboard in a real browser (Debian's Chromium under Playwright) against a real
`caldera serve`, driven through the CLI like a user would: log in with a token, watch a job
appear and change state without a reload, see a preemption on both jobs' timelines and in the
preemption list, and be denied another team's jobs. Each page is saved as a screenshot
(`CALDERA_UI_SCREENSHOTS=docs/images make test` refreshes the README's)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect
from service_support import ALICE, BOB, JOB_PYTHON, OPS, Server, reachable_dir, wait_for

from caldera.core import WaitReason

LIVE = 20_000  # ms: a live region refreshes every 2 s; a start takes a cycle and a fork


def log_in(browser: Any, server: Server, token: str, path: str = "/ui/jobs") -> Page:
    """A fresh browser context, sent to the login page by `path`, logged in, back at `path`."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.goto(server.url + path)
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    page.fill("#token", token)
    page.click("#login")
    page.wait_for_url(server.url + path)
    return page


def mark(page: Page) -> None:
    """A flag only this page load carries: a reload or navigation would drop it."""
    page.evaluate("window.__calderaNoReload = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__calderaNoReload === true"), "the page was reloaded"


def shoot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"ui-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} looks empty"


def submit(server: Server, token: str, *args: str, script: str) -> str:
    done = server.cli("submit", *args, "--", JOB_PYTHON, "-c", script, token=token)
    return done.stdout.strip()


def sleeper(server: Server, queue: str, token: str = ALICE, **fields: Any) -> str:
    command = [JOB_PYTHON, "-c", "import time; time.sleep(600)"]
    return str(server.client(token).submit(command, queue, **fields)["id"])


def test_a_submitted_job_appears_and_changes_state_without_a_reload(
    browser: Any, server: Server, tmp_path: Path, shots: Path
) -> None:
    page = log_in(browser, server, ALICE)
    mark(page)
    go = reachable_dir("caldera-ui-") / "go"  # the job's account must see it appear
    script = (
        "import os, time\n"
        "print('hello from the job', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.1)\n"
    )
    job = submit(server, ALICE, "--queue", "team-a", "--name", "train", script=script)
    row = page.locator(f'tr[data-job="{job}"]')
    expect(row).to_have_attribute("data-state", "Running", timeout=LIVE)
    expect(row).to_contain_text("train")
    assert_not_reloaded(page)
    shoot(page, shots, "jobs")

    page.click(f'tr[data-job="{job}"] a')
    page.wait_for_url(server.url + f"/ui/jobs/{job}")
    mark(page)
    expect(page.locator("#job-state")).to_have_attribute("data-state", "Running")
    expect(page.locator("#log")).to_contain_text("hello from the job", timeout=LIVE)
    expect(page.locator('#timeline li[data-kind="start"]')).to_have_count(1)
    go.touch()
    expect(page.locator("#job-state")).to_have_attribute("data-state", "Succeeded", timeout=LIVE)
    expect(page.locator('#timeline li[data-kind="finish"]')).to_have_count(1, timeout=LIVE)
    assert_not_reloaded(page)
    shoot(page, shots, "job")


def test_a_preemption_shows_on_both_jobs_timelines(
    browser: Any, server: Server, shots: Path
) -> None:
    victims = [sleeper(server, "team-a") for _ in range(8)]
    wait_for(
        "8 jobs running",
        lambda: all(server.client(OPS).get(v)["state"] == "Running" for v in victims),
    )
    page = log_in(browser, server, ALICE, f"/ui/jobs/{victims[0]}")
    mark(page)
    expect(page.locator("#job-state")).to_have_attribute("data-state", "Running")

    large = submit(
        server,
        ALICE,
        "--queue", "team-a", "--type", "large-job", "--gpus", "8", "--name", "big",
        script="import time; time.sleep(600)",
    )  # fmt: skip
    evicted = page.locator('#timeline li[data-kind="evict"]')
    expect(evicted).to_have_count(1, timeout=LIVE)
    expect(evicted).to_contain_text(large)
    expect(page.locator("#job-state")).not_to_have_attribute("data-state", "Running")
    expect(page.locator('#timeline li[data-kind="requeue"]')).to_have_count(1, timeout=LIVE)
    assert_not_reloaded(page)
    # Requeued behind the large job: why it waits is the core's reason, not a guess.
    expect(page.locator("#job-state")).to_have_attribute("data-state", "Pending", timeout=LIVE)
    reason = page.locator("#why .badge")
    expect(reason).to_be_visible(timeout=LIVE)
    assert reason.inner_text() in {r.value for r in WaitReason}
    shoot(page, shots, "job-waiting")

    page.goto(server.url + f"/ui/jobs/{large}")
    preempted = page.locator('#timeline li[data-kind="preempted"]')
    expect(preempted).to_have_count(8)
    expect(preempted.first).to_contain_text("preempt")
    expect(page.locator(f'#timeline a[href="/ui/jobs/{victims[0]}"]')).to_have_count(1)
    expect(page.locator("#job-state")).to_have_attribute("data-state", "Running", timeout=LIVE)

    page.goto(server.url + "/ui/preemptions")
    expect(page.locator("#preempt-count")).to_have_text("8")
    taken = page.locator(f'tr[data-victim="{victims[0]}"][data-preemptor="{large}"]')
    expect(taken).to_contain_text("preempt")
    shoot(page, shots, "preemptions")

    page.goto(server.url + "/ui/cluster")
    expect(page.locator(f'.gpu.held:has(a[href="/ui/jobs/{large}"])')).to_have_count(8)
    shoot(page, shots, "cluster")
    page.goto(server.url + "/ui/queues")
    expect(page.locator('tr[data-queue="team-b"]')).to_have_count(0)  # not alice's queue
    admin = log_in(browser, server, OPS, "/ui/queues")
    expect(admin.locator('tr[data-queue="team-a"] .allocated')).to_have_text("8.0")
    expect(admin.locator('tr[data-queue="team-a"] .pending')).to_have_text("8")
    expect(admin.locator('tr[data-queue="team-b"] .allocated')).to_have_text("0.0")
    shoot(admin, shots, "queues")
    admin.goto(server.url + "/ui")
    expect(admin.locator("#n-util .value")).to_contain_text("%")
    shoot(admin, shots, "overview")


def test_a_user_is_denied_another_team_s_jobs(browser: Any, server: Server) -> None:
    bobs = sleeper(server, "team-b", token=BOB)
    alices = sleeper(server, "team-a", token=ALICE)
    alice = log_in(browser, server, ALICE, "/ui/jobs?state=all")
    expect(alice.locator(f'tr[data-job="{alices}"]')).to_have_count(1, timeout=LIVE)
    expect(alice.locator(f'tr[data-job="{bobs}"]')).to_have_count(0)
    answer = alice.goto(server.url + f"/ui/jobs/{bobs}")
    assert answer is not None and answer.status == 403
    expect(alice.locator("#denied")).to_contain_text("team-b")
    expect(alice.locator("body")).not_to_contain_text("time.sleep")  # nothing of the job leaks

    bob = log_in(browser, server, BOB, f"/ui/jobs/{bobs}")
    expect(bob.locator("#job-state")).to_have_attribute("data-state", "Running", timeout=LIVE)
    admin = log_in(browser, server, OPS, "/ui/jobs?state=all")
    expect(admin.locator(f'tr[data-job="{bobs}"]')).to_have_count(1, timeout=LIVE)
    expect(admin.locator(f'tr[data-job="{alices}"]')).to_have_count(1)


def test_a_bad_token_is_refused(browser: Any, server: Server) -> None:
    page = browser.new_context().new_page()
    page.goto(server.url + "/ui/queues")
    page.fill("#token", "not-a-token")
    page.click("#login")
    expect(page.locator("#login-error")).to_have_text("unknown token")
    page.goto(server.url + "/ui/queues")
    expect(page).to_have_url(re.compile(r"/ui/login"))
