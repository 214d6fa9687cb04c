"""A local JupyterHub with jupyter-pause: ``jupyterhub -f deploy/jupyterhub/jupyterhub_config.py``.

Idle servers are paused (every notebook checkpointed, the server stopped)
instead of culled, by the ``jupyter-pause-hub`` service; its page for admins
is at http://127.0.0.1:8000/services/jupyter-pause/.  See docs/jupyterhub.md.

For trying it out on one machine this uses the dummy authenticator and
``SimpleLocalProcessSpawner`` (every hub user runs as the hub's own Unix
user, with a home in /tmp/jupyterhub-home/<name>).  For real users, swap in
your authenticator and ``LocalProcessSpawner`` (or KubeSpawner, see the
docs): nothing else changes.  jupyter-pause must be installed where the
single-user servers run; the hub needs ``jupyter-pause[hub]``.
"""

import os
import secrets
import shutil

c = get_config()  # noqa: F821 - defined by JupyterHub when it loads this file

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = 8000

# -- users (replace for production) -------------------------------------------
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "/tmp/jupyterhub-home/{username}"
if os.geteuid() == 0:
    c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = "/lab"
# where servers hand over their scheduled resumes (the service below, directly)
c.Spawner.environment = {"JUPYTER_PAUSE_HUB_URL": "http://127.0.0.1:10101/services/jupyter-pause/"}

# -- jupyter-pause --------------------------------------------------------------
# The single-user servers pick the jupyterhub backend by themselves.  To have
# the notebooks resume on the next start without a click, also put
#   {"JupyterHubBackend": {"resume_on_start": true}}
# into a jupyter_server_config.json on the servers' config path (`jupyter --paths`;
# not jupyter_server_config.d/, from which Jupyter Server reads only the
# extensions to enable).

# Servers stop themselves at the end of a pause: add delete:servers!server to
# the default 'server' role (keep its two default scopes).  A pause with a
# scheduled resume hands the time to the service first, and every server hands
# it its ledger rolled up (the fleet): access:services!service=jupyter-pause.
c.JupyterHub.load_roles = [
    # a token never has more than its owner: users need the access their servers use
    {"name": "user", "scopes": ["self", "access:services!service=jupyter-pause"]},
    {
        "name": "server",
        "scopes": [
            "users:activity!user",
            "access:servers!server",
            "delete:servers!server",
            "access:services!service=jupyter-pause",
        ],
    },
    {
        "name": "jupyter-pause",
        "description": "jupyter-pause-hub: read activity, pause or start servers",
        "scopes": [
            "list:users",
            "read:users",  # who is an admin (the page is theirs)
            "read:users:activity",
            "read:servers",
            "delete:servers",
            "start:servers",
            "access:servers",
        ],
        "services": ["jupyter-pause"],
    },
]

c.JupyterHub.services = [
    {
        "name": "jupyter-pause",
        "url": "http://127.0.0.1:10101",
        "command": [
            shutil.which("jupyter-pause-hub") or "jupyter-pause-hub",
            "--proxy-url=http://127.0.0.1:8000",
            "--timeout=1800",  # seconds without notebook activity
            "--fallback=leave",  # servers without jupyter-pause: 'leave' or 'cull'
        ],
        "api_token": os.environ.get("JUPYTER_PAUSE_HUB_TOKEN") or secrets.token_hex(32),
        "oauth_no_confirm": True,  # admins open the page without a consent screen
    }
]
# jupyterhub-idle-culler is not needed; if you keep it for other reasons, give it
# a --timeout well above the service's so that it never stops a server first.
