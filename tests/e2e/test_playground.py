"""The browser playground at the gateway's `/`, in a real headless Chromium driven by Playwright: it loads,
speaking plays audio that arrives in chunks (each with its lane and arrival time), a server error shows in
the page, and the download is the chosen format. Screenshots go to the test's directory."""
from __future__ import annotations

import shutil

import pytest

from tests.audio_decode import decode

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium)")
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, headless=True,
                                          args=["--autoplay-policy=no-user-gesture-required", "--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, gateway):
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(gateway.url + "/")
    page.wait_for_function("document.querySelector('#model').options.length > 0", timeout=TIMEOUT_MS)
    yield page
    context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"


def test_speaking_plays_audio_that_arrives_in_chunks(page, tmp_path):
    page.fill("#max-seconds", "1.6")
    page.check("#ignore-eos")  # random weights: exactly 1.6 s, chunks of 2, 4, 8, 6 frames
    page.click("#speak-button")
    page.wait_for_function("window.voxlane.done || window.voxlane.error", timeout=TIMEOUT_MS)
    state = page.evaluate("window.voxlane")
    assert state["error"] is None
    chunks = state["chunks"]
    assert [c["index"] for c in chunks] == list(range(len(chunks))) and len(chunks) >= 3
    assert chunks[0]["lane"] == "urgent" and {c["lane"] for c in chunks} <= {"urgent", "background"}
    assert all(a["arrivedMs"] <= b["arrivedMs"] for a, b in zip(chunks, chunks[1:]))  # in pieces, in order
    assert state["scheduledSamples"] == round(1.6 * state["sampleRate"])  # every sample queued for playback
    assert page.locator("#chunks tbody tr").count() == len(chunks)
    assert page.inner_text("#summary").startswith("TTFA ")
    page.wait_for_function("window.voxlane.metricsRefreshed >= 2", timeout=TIMEOUT_MS)
    assert "ready" in page.inner_text("#metrics")
    page.screenshot(path=str(tmp_path / "playground.png"), full_page=True)


def test_a_server_error_is_shown_in_the_page(page, tmp_path):
    page.fill("#text", "   ")  # the server refuses whitespace-only text
    page.click("#speak-button")
    page.wait_for_selector("#error:not([hidden])", timeout=TIMEOUT_MS)
    assert page.inner_text("#error").startswith("400: ")
    assert "empty" in page.inner_text("#error")
    page.screenshot(path=str(tmp_path / "playground-error.png"), full_page=True)


def test_download_is_the_chosen_format(page, tmp_path):
    page.fill("#max-seconds", "0.8")
    page.check("#ignore-eos")
    page.click("#speak-button")
    page.wait_for_function("window.voxlane.done", timeout=TIMEOUT_MS)
    page.select_option("#format", "mp3")
    with page.expect_download(timeout=TIMEOUT_MS) as caught:
        page.click("#download-button")
    path = tmp_path / "voxlane.mp3"
    caught.value.save_as(path)
    audio, rate = decode("mp3", path.read_bytes())
    assert rate == 24000 and 0.8 <= audio.size / rate <= 1.0  # 0.8 s and the encoder's delay
    assert page.evaluate("window.voxlane.downloaded")["format"] == "mp3"
