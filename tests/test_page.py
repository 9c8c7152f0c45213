"""present/page.py: the HTML page around a notebook's cells, its title escaped, its sections anchored and listed."""
from __future__ import annotations

import re

from rollout_study.present.page import CONTENTS_FROM, page


def _contents(text: str) -> list[tuple[str, str]]:
    return re.findall(r'href="#([^"]+)">([^<]+)<', re.search(r'<nav class="contents">.*?</nav>', text).group(0))


def test_page_escapes_its_title():
    text = page("a<b & c", "<p>cells</p>")
    assert "<title>a&lt;b &amp; c</title>" in text and "<p>cells</p>" in text


def test_a_page_of_two_sections_or_more_lists_them_under_its_title_each_with_an_anchor():
    # a markdown cell's heading comes with nbconvert's id and pilcrow; the notebook code's output headings with none
    cells = ('<h1 id="Report">Report<a class="anchor-link" href="#Report">\u00b6</a></h1><p>intro</p>'
             '<h2 id="How-to-read">How to read<a class="anchor-link" href="#How-to-read">\u00b6</a></h2>'
             '<h2>Synthetic model: tiny &amp; <code>small</code></h2><h2>Synthetic model: tiny &amp; small</h2>'
             '<h2 class="x">Points repeated alone</h2><p id="Points-repeated-alone">taken</p>')
    text = page("t", cells)
    anchors = ["How-to-read", "Synthetic-model-tiny-small", "Synthetic-model-tiny-small-1", "Points-repeated-alone-1"]
    assert re.findall(r'<h2[^>]*\bid="([^"]+)"', text) == anchors  # unique, an existing id neither changed nor reused
    assert '<h2 class="x" id="Points-repeated-alone-1">' in text
    assert _contents(text) == [(anchors[0], "How to read"), (anchors[1], "Synthetic model: tiny &amp; small"),
                               (anchors[2], "Synthetic model: tiny &amp; small"), (anchors[3], "Points repeated alone")]
    assert text.index("</h1>") < text.index("<nav") < text.index("<p>intro</p>")  # under the title
    assert CONTENTS_FROM == 2  # a one-model sweep report's second section starts about 12,000 pixels down
    one = page("t", "<h1>R</h1><h2>a</h2>")
    assert "<nav" not in one and '<h2 id="a">' in one  # anchored, no list
    untitled = page("t", "<h2>a</h2><h2>b</h2><h2>c</h2><h1>Late</h1>")
    assert untitled.index("<nav") < untitled.index("<h2")  # no title above the sections: the list opens the page


def test_a_sections_own_id_is_read_as_the_browser_reads_it_and_one_given_twice_is_made_unique():
    # nbconvert writes "## A & B" as id="A-&amp;-B" (escaped, as every attribute), and two "## Notes" as one id
    cells = ('<h1>R</h1><h2 id="A-&amp;-B">A &amp; B<a class="anchor-link" href="#A-&amp;-B">\u00b6</a></h2>'
             '<h2 data-id="x">Data</h2><h2 id=\'quoted\'>Quoted</h2>'
             '<h2 id="Notes">Notes<a class="anchor-link" href="#Notes">\u00b6</a></h2>'
             '<h2 id="Notes">Notes<a class="anchor-link" href="#Notes">\u00b6</a></h2>')
    text = page("t", cells)
    assert _contents(text) == [("A-&amp;-B", "A &amp; B"), ("Data", "Data"), ("quoted", "Quoted"),
                               ("Notes", "Notes"), ("Notes-1", "Notes")]
    assert '<h2 data-id="x" id="Data">' in text and "<h2 id='quoted'>" in text  # data-id is no id; one id each
    assert '<h2 id="Notes-1">Notes<a class="anchor-link" href="#Notes-1">' in text  # its pilcrow follows it
