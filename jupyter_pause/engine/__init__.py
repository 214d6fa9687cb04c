"""The kernel state engine: checkpoint live objects to disk and restore them.

Modules (each small, each with one job): ``paths`` (where), ``signing`` (HMAC),
``manifest`` (what), ``store`` (atomic commit, listing, GC; torch-free, used by
the server), ``tensors`` (safetensors streaming), ``pickling`` (object graph),
``namespace`` (which variables), ``rng``, ``progress`` and ``api`` (public
functions). Importing this package imports none of torch, numpy or safetensors.
"""
