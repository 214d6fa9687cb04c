"""Which idle threshold is worth it: a discrete-event simulation over activity traces.

``traces`` makes or reads the traces (synthetic, CSV, a ledger); ``simulate``
runs each policy over them.  The model and its assumptions are in
``docs/accounting.md``.
"""
