"""GPU-time accounting, the pause/resume trial and the idle-threshold simulator.

Pure logic: nothing here imports the server.  ``report`` turns the ledger into
numbers, ``html`` draws them, ``simulate``/``traces`` answer "which idle
threshold is worth it", and ``client`` is the small REST/kernel client the
trial and the probe use to drive a real Jupyter server.
"""
