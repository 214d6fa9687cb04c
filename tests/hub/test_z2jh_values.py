"""deploy/z2jh/values.yaml: Zero to JupyterHub as a file, loaded as the chart and Jupyter load it.

The hub side goes through the chart's own translation of ``hub.services`` and
``hub.loadRoles`` (zero-to-jupyterhub-k8s ``jupyterhub/files/hub/jupyterhub_config.py``:
each is a dict of dicts keyed by name, appended to ``c.JupyterHub.services`` /
``c.JupyterHub.load_roles`` with the key as the default name, the service's
``api_token`` from the chart's secret) into a JupyterHub config, which
JupyterHub's own traits then take.  The roles must be those of
deploy/jupyterhub/jupyterhub_config.py, which the hub tests run; the service's
command must parse with ``jupyter-pause-hub``'s own options.  The single-user
side (``extraEnv``, ``extraFiles``) is laid out over a docker-stacks-like
image and loaded with Jupyter Server's config loader.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from jupyterhub.app import JupyterHub
from traitlets.config import Config

from jupyter_pause.hub.service import PauseService
from tests.config_layout import Layout, load

from .conftest import ROLES

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "z2jh" / "values.yaml"


def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def hub_config(values: dict) -> Config:
    """What the chart's jupyterhub_config.py makes of hub.services and hub.loadRoles."""
    c = Config()
    c.JupyterHub.services = []
    c.JupyterHub.load_roles = []
    hub = copy.deepcopy(values.get("hub") or {})
    for key, service in (hub.get("services") or {}).items():
        service.setdefault("name", key)
        service.pop("apiToken", None)
        service["api_token"] = "from-the-charts-secret"
        c.JupyterHub.services.append(service)
    for key, role in (hub.get("loadRoles") or {}).items():
        role.setdefault("name", key)
        c.JupyterHub.load_roles.append(role)
    return c


def test_the_hub_loads_the_service_and_its_roles():
    hub = JupyterHub(config=hub_config(values()))
    (service,) = [s for s in hub.services if s["name"] == "jupyter-pause"]
    assert service["command"][0] == "jupyter-pause-hub"
    assert service["url"] == "http://hub:10101"
    options = PauseService()
    options.parse_command_line(service["command"][1:])
    assert (options.ip, options.proxy_url, options.timeout) == (
        "0.0.0.0",
        "http://proxy-public",
        1800,
    )
    assert options.data_dir == "/srv/jupyterhub"
    roles = {r["name"]: r for r in hub.load_roles}
    assert set(roles) == set(ROLES)  # user, server, jupyter-pause: the tested roles
    for name, role in ROLES.items():
        assert set(roles[name]["scopes"]) == set(role["scopes"]), name
        assert roles[name].get("services") == role.get("services"), name


def test_the_culler_is_off_and_the_service_reachable():
    v = values()
    assert v["cull"]["enabled"] is False
    (port,) = v["hub"]["service"]["extraPorts"]
    assert port["port"] == port["targetPort"] == 10101
    assert v["singleuser"]["storage"]["type"] == "dynamic"  # checkpoints outlive the pod
    url = v["singleuser"]["extraEnv"]["JUPYTER_PAUSE_HUB_URL"]
    assert url == "http://hub:10101/services/jupyter-pause/"


def test_the_single_user_servers_resume_on_start(tmp_path):
    """The extra file is read by Jupyter Server (not only its extension list), the image's
    own config stays."""
    single = values()["singleuser"]
    layout = Layout(
        files={f["mountPath"]: json.dumps(f["data"]) for f in single["extraFiles"].values()},
        env={k: v for k, v in (single.get("extraEnv") or {}).items() if isinstance(v, str)},
    )
    loaded = load(layout, tmp_path)
    assert loaded["config"]["JupyterHubBackend"] == {"resume_on_start": True}
    assert loaded["ip"] == "0.0.0.0"
