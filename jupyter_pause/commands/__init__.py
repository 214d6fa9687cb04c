"""Sub-commands of ``jupyter pause``; see :mod:`jupyter_pause.cli`."""
