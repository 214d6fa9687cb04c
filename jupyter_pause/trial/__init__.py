"""The pause/resume trial a team runs before enabling pause, and its release-check probe.

``run`` drives a real Jupyter server through run, pause, resume and check
(``jupyter pause trial``); ``probe`` tells a live process that came back from
a fresh one with a checkpoint (``jupyter pause probe``).
"""
