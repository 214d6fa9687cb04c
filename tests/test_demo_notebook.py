"""notebooks/resumable_demo.ipynb: opens clean, runs twice before any pause without
claiming a snapshot restore, and passes `jupyter pause trial` unmodified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_pause.cli import main

DEMO = Path(__file__).parents[1] / "notebooks" / "resumable_demo.ipynb"


def code_cells() -> list[str]:
    nb = json.loads(DEMO.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_it_opens_clean_with_full_language_info():
    info = json.loads(DEMO.read_text())["metadata"]["language_info"]
    for key in ("name", "version", "mimetype", "file_extension", "codemirror_mode",
                "pygments_lexer", "nbconvert_exporter"):  # fmt: skip
        assert key in info, key


def test_run_all_twice_before_any_pause_passes_and_claims_no_restore():
    pytest.importorskip("torch")
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        outputs = []

        def run(code):
            chunks = []
            reply = kc.execute_interactive(
                code,
                timeout=300,
                output_hook=lambda m: chunks.append(m["content"].get("text", "")),
            )
            assert reply["content"]["status"] == "ok", reply["content"]
            return "".join(chunks)

        for _ in range(2):  # Run All, then Run All again
            outputs = [run(code) for code in code_cells()]
            check = outputs[-1]
            assert "ALL PASS" in check and "FAIL:" not in check
            assert "restored from a snapshot" not in check
            assert "not paused yet" in check
        assert "ALL PASS" in run(code_cells()[-1])  # the check cell alone, once more
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_the_trial_passes_on_it_and_writes_json_only_where_asked(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "results" / "trial.json"
    out.parent.mkdir()
    assert main(["trial", str(DEMO), "--json", str(out), "--timeout", "300"]) == 0, (
        capsys.readouterr().out
    )
    assert json.loads(out.read_text())["passed"] is True
    assert list(cwd.iterdir()) == []
