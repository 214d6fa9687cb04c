"""Every word the JupyterLab extension shows goes through the translator
(``trans.__``, domain ``jupyter_pause``): no dialog title, button label,
caption, notification or text node is a bare string literal with words in it.
A static check of ``labextension/src``, like the state-list check beside it."""

import re
from pathlib import Path

import pytest

SOURCES = sorted((Path(__file__).parents[1] / "labextension" / "src").glob("*.ts"))

#: places whose string is shown to a person, followed by a string literal
SHOWN = re.compile(
    r"""(?:\b(?:title|label|caption)\s*:\s*"""
    r"""|\.textContent\s*=\s*"""
    r"""|\b(?:showErrorMessage|Notification\.(?:emit|error|warning|info|success))\(\s*)"""
    r"""(?P<literal>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|`(?:[^`\\]|\\.)*`)""",
    re.S,
)
WORDS = re.compile(r"[A-Za-z]{2,}")


def words_outside_placeholders(literal: str) -> list[str]:
    return WORDS.findall(re.sub(r"\$\{[^}]*\}", "", literal[1:-1]))


def test_the_sources_are_found():
    assert len(SOURCES) > 10 and any(p.name == "rerun.ts" for p in SOURCES)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_no_user_visible_string_bypasses_the_translator(source):
    text = source.read_text()
    bare = [
        f"{source.name}:{text.count(chr(10), 0, m.start()) + 1}: {m['literal'][:60]}"
        for m in SHOWN.finditer(text)
        if words_outside_placeholders(m["literal"])
    ]
    assert not bare, "wrap these in trans.__(...):\n" + "\n".join(bare)


def test_the_check_catches_a_bare_title_and_spares_a_translated_one():
    assert SHOWN.search("showDialog({ title: 'Re-run cells?' })")
    assert not SHOWN.search("showDialog({ title: trans.__('Re-run cells?') })")
    assert SHOWN.search("showErrorMessage(\n  'Re-run failed',")
    (m,) = SHOWN.finditer("node.textContent = `${name}: ${why}`;")
    assert words_outside_placeholders(m["literal"]) == []
