"""The published pages as a reader's browser draws them: no page scrolls sideways in a 1,024-pixel window, and
every figure loads and is drawn at 70% of its size or more in a 1,280-pixel one; printed on A4, every table, code
cell and figure fits the paper and no number is broken across lines.

Needs Playwright and a Chromium (Debian's `chromium` package; ROLLOUT_STUDY_CHROMIUM names another); skipped
without them, as CI has neither. Before these checks the all-engines runs' break-even figure (eight pairs in one
row, 4,400 pixels) was drawn at 28%, and 11 of the 38 pages scrolled sideways at 1,024 pixels; printed, all 38
cut a table or a code cell at the paper's edge (a scrolling table prints its visible part alone)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "reports" / "index.html", *(ROOT / "reports").glob("*/report.html"),
                *(ROOT / "reports").glob("*/study.html")])
CHROMIUM = os.environ.get("ROLLOUT_STUDY_CHROMIUM") or shutil.which("chromium")

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="no Chromium to draw the pages")

SIDEWAYS = "() => document.documentElement.scrollWidth - window.innerWidth"
# A4 less Chrome's default 10 mm margins, at 96 pixels an inch: US Letter's is wider
PAPER = 718
PAST_THE_PAPER = """() => [...document.querySelectorAll('table, pre, img')].filter(e =>
    e.getBoundingClientRect().right > window.innerWidth + 0.5 || e.scrollWidth > e.clientWidth + 1).length"""
BROKEN_NUMBERS = """() => [...document.querySelectorAll('td.n')].filter(cell => {
    const text = document.createRange(); text.selectNodeContents(cell); return text.getClientRects().length > 1;
}).length"""
FIGURES = """() => [...document.querySelectorAll('img')].map(i => [i.getAttribute('src'), i.naturalWidth, i.width])"""


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def _open(browser, page: Path, width: int):
    tab = browser.new_page(viewport={"width": width, "height": 900})
    tab.goto(page.as_uri())  # returns once the page and its figures have loaded
    return tab


def test_the_published_pages_are_many():
    assert len(PAGES) > 30 and (ROOT / "reports" / "index.html") in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "reports")))
def test_a_page_never_scrolls_sideways_and_draws_its_figures_near_full_size(browser, page):
    tab = _open(browser, page, 1024)
    try:
        assert tab.evaluate(SIDEWAYS) <= 0, "the page is wider than a 1,024-pixel window: a table or figure overflows"
    finally:
        tab.close()
    tab = _open(browser, page, 1280)
    try:
        for source, natural, drawn in tab.evaluate(FIGURES):
            assert natural > 0, f"{source} did not load"
            assert drawn >= 0.7 * natural, f"{source}: {natural} pixels drawn at {drawn}"
    finally:
        tab.close()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "reports")))
def test_a_printed_page_keeps_its_tables_code_and_figures_on_the_paper_and_its_numbers_whole(browser, page):
    tab = browser.new_page(viewport={"width": PAPER, "height": 1000})
    try:
        tab.emulate_media(media="print")  # the page's print rules, laid out at the paper's width
        tab.goto(page.as_uri())
        assert tab.evaluate(PAST_THE_PAPER) == 0, "a table, code cell or figure is cut at an A4 page's edge"
        assert tab.evaluate(BROKEN_NUMBERS) == 0, "a number is broken across lines"
    finally:
        tab.close()
