"""A notebook's workload class is decided when its kernel starts, not at the idle
watcher's first look: a kernel started and paused before any idle check still has
its hours counted under its class."""

import json

import pytest

from jupyter_pause.report.build import build_report

from .helpers import execute, operate, start_session, wait_for_state, wait_until


@pytest.fixture(params=[True, False], ids=["auto-pause", "auto-pause-off"])
def jp_server_config(jp_server_config, request):
    return {
        **jp_server_config,
        "PauseApp": {
            **jp_server_config["PauseApp"],
            # the class is the ledger's as much as the idle policy's: off, it is still known
            "auto_pause": request.param,
            # no idle check runs during the test: the first would come in an hour
            "idle_check_interval": 3600,
            "workload_classes": {"training": {"idle_threshold": 7200}},
        },
    }


async def test_rows_before_the_first_idle_check_carry_the_class(
    jp_fetch, jp_serverapp, jp_root_dir
):
    path = "train.ipynb"
    (jp_root_dir / path).write_text(
        json.dumps(
            {
                "cells": [],
                "metadata": {
                    "kernelspec": {"name": "python3", "display_name": "Python 3"},
                    "jupyter_pause": {"workload_class": "training"},
                },
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    # nothing here asks for GET status: it would classify the notebook as it answers
    kernel_id = (await start_session(jp_fetch, path))["kernel"]["id"]
    await wait_until(
        lambda: ledger.events(path=path, types=["kernel-started"]), what="the kernel's start"
    )
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(jp_serverapp, kernel_id, "x = 1")
    op = await operate(jp_fetch, "pause", path)
    assert op["outcome"] == "succeeded", op

    rows = ledger.events(path=path)
    types = [e.type.value for e in rows]
    assert "kernel-started" in types and "accelerator-released" in types, types
    assert {(e.type.value, e.workload_class) for e in rows} == {
        (e.type.value, "training") for e in rows
    }
    by_class = {g["key"]: g for g in build_report(ledger).to_json()["by_class"]}
    assert list(by_class) == ["training"], by_class
    assert by_class["training"]["gpu_hours"]["allocated"] > 0
