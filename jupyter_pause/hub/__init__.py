"""jupyter-pause on JupyterHub.

* :mod:`.policy`: which servers the service pauses, culls or leaves (pure).
* :mod:`.service`: ``jupyter-pause-hub``, the managed service that pauses
  idle servers instead of culling them, with an admin page.

The server side (pausing a whole single-user server and resuming on its
next start) is the ``jupyterhub`` backend, :mod:`jupyter_pause.backends.jupyterhub`.
Both use :mod:`jupyter_pause.hub_api`, the async client for the Hub REST API
and for the jupyter-pause API of a user's server (through the proxy), which
stands below both.  See docs/jupyterhub.md.
"""
