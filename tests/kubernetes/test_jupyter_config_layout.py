"""The image's and the pod examples' Jupyter config, loaded as Jupyter loads it.

Each layout -- the ``Dockerfile``'s ``COPY`` and ``ENV``, the StatefulSet of
docs/kubernetes.md and the shipped WorkspaceKind (their mounts of the ConfigMap
``jupyter-pause-server-config`` and their env) -- is laid out in a temporary
root over a docker-stacks-like base image, whose
``/etc/jupyter/jupyter_server_config.py`` makes the server listen on all
interfaces.  A fresh process points Jupyter's system config path at that root
and loads the config with ``ServerApp.load_config_file()``: the base's
``ServerApp.ip`` must survive, and the snapshot-safe settings must apply.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.config_layout import Layout, load

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "deploy" / "jupyter-config"
CONFIGMAP = "jupyter-pause-server-config"


def _expand(value: str, env: dict[str, str]) -> str:
    """Docker's ``${NAME}``, ``${NAME:-word}``, ``${NAME:+word}``, innermost first."""
    inner = re.compile(r"\$\{(\w+)(?::([-+])((?:(?!\$\{)[^}])*))?\}")

    def one(m: re.Match) -> str:
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        current = env.get(name, "")
        if op == "+":
            return word if current else ""
        if op == "-":
            return current or word
        return current

    while inner.search(value):
        value = inner.sub(one, value)
    return value


def dockerfile_instructions(dockerfile: Path = REPO / "Dockerfile") -> list[list[str]]:
    """Each instruction's words (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [words for line in text.splitlines() if (words := shlex.split(line, comments=True))]


def dockerfile_layout(base_env: dict[str, str] | None = None) -> Layout:
    """The files the Dockerfile copies from the repository, and its ENV over ``base_env``."""
    layout = Layout(env=dict(base_env or {}))
    for instruction, *args in dockerfile_instructions():
        if instruction.upper() == "ENV":
            pairs = dict(arg.split("=", 1) for arg in args)
            layout.env.update({k: _expand(v, layout.env) for k, v in pairs.items()})
        elif instruction.upper() == "COPY":
            *sources, dest = [a for a in args if not a.startswith("--")]
            for source in sources:
                path = REPO / source
                if path.is_file():  # dist/ (the wheel) is installed, not configuration
                    target = dest + path.name if dest.endswith("/") else dest
                    layout.files[target] = path.read_text()
    return layout


def configmap_data() -> dict[str, str]:
    """The ConfigMap ``jupyter-pause-server-config`` as deploy/jupyter-config generates it."""
    kustomization = yaml.safe_load((CONFIG_DIR / "kustomization.yaml").read_text())
    (generator,) = [g for g in kustomization["configMapGenerator"] if g["name"] == CONFIGMAP]
    return {name: (CONFIG_DIR / name).read_text() for name in generator["files"]}


def pod_layout(env: list[dict], mounts: list[dict], volumes: list[dict]) -> Layout:
    """A container's env values and its mounts of the ConfigMap."""
    layout = Layout(env={e["name"]: e["value"] for e in env if "value" in e})
    by_name = {v["name"]: v for v in volumes}
    data = configmap_data()
    for mount in mounts:
        volume = by_name.get(mount["name"], {})
        if (volume.get("configMap") or {}).get("name") != CONFIGMAP:
            continue
        if "subPath" in mount:  # one file at mountPath
            layout.files[mount["mountPath"]] = data[mount["subPath"]]
        else:  # a directory with one file per key
            for key, content in data.items():
                layout.files[f"{mount['mountPath'].rstrip('/')}/{key}"] = content
    return layout


def statefulset_layout() -> Layout:
    """The StatefulSet example of docs/kubernetes.md."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (sts,) = [
        d for b in blocks for d in yaml.safe_load_all(b) if d and d.get("kind") == "StatefulSet"
    ]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod_layout(container.get("env") or [], container["volumeMounts"], pod["volumes"])


def workspacekind_layout() -> Layout:
    kind = yaml.safe_load(
        (REPO / "deploy" / "kubeflow-workspaces" / "workspacekind.yaml").read_text()
    )
    template = kind["spec"]["podTemplate"]
    return pod_layout(template["extraEnv"], template["extraVolumeMounts"], template["extraVolumes"])


LAYOUTS = {
    "Dockerfile": dockerfile_layout,
    "StatefulSet in docs/kubernetes.md": statefulset_layout,
    "WorkspaceKind": workspacekind_layout,
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_base_images_config_survives_and_ours_applies(name, tmp_path):
    layout = LAYOUTS[name]()
    loaded = load(layout, tmp_path)
    del loaded["config"]
    assert loaded == {
        "ip": "0.0.0.0",  # the base's: the pod listens on all interfaces
        "transport": "ipc",
        "selector": "PollSelector",
        "runtime_dir": "/tmp/jupyter-runtime",
    }


def test_a_base_images_own_config_path_is_kept():
    """The Dockerfile's ``JUPYTER_CONFIG_PATH`` puts the drop-in first and keeps the base's."""
    env = dockerfile_layout({"JUPYTER_CONFIG_PATH": "/opt/base/jupyter"}).env
    assert env["JUPYTER_CONFIG_PATH"] == "/etc/jupyter-pause:/opt/base/jupyter"
    assert dockerfile_layout().env["JUPYTER_CONFIG_PATH"] == "/etc/jupyter-pause"


def test_the_build_context_is_only_the_wheel_and_the_config():
    """.dockerignore: everything out (.venv, node_modules, .git ...), then what COPY reads."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    assert patterns[0] == "*"
    included = {p[1:] for p in patterns[1:] if p.startswith("!")}
    copied = {
        source
        for instruction, *args in dockerfile_instructions()
        if instruction.upper() == "COPY"
        for source in [a for a in args if not a.startswith("--")][:-1]
    }
    assert copied == {"dist/", "deploy/jupyter-config/jupyter_server_config.py"}
    assert included == {
        "dist/jupyter_pause-*.whl",
        "deploy/jupyter-config/jupyter_server_config.py",
    }


def test_the_image_runs_as_the_base_images_unprivileged_user():
    users = [args for instruction, *args in dockerfile_instructions() if instruction == "USER"]
    assert users, "the Dockerfile names no USER"
    (last,) = users[-1]
    assert _expand(last, {"NB_UID": "1000"}) == "1000"  # docker-stacks' jovyan
    assert _expand(last, {}) not in ("", "0", "root")


@pytest.mark.parametrize("name", ["StatefulSet in docs/kubernetes.md", "WorkspaceKind"])
def test_the_shutdown_grace_follows_the_pods(name, tmp_path):
    """The pod examples say how long SIGTERM comes before SIGKILL, and the shutdown grace
    is that, less the time the server needs after its saves."""
    layout = LAYOUTS[name]()
    stop = float(layout.env["JUPYTER_PAUSE_STOP_SECONDS"])
    grace = load(layout, tmp_path)["config"]["PauseApp"]["shutdown_grace"]
    assert 0 < grace < stop
