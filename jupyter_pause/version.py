"""The package's version, for the modules that report it: they import it from here,
not from the package itself, whose entry points import them in turn."""

try:
    from ._version import __version__
except ImportError:  # a source checkout that was never built
    __version__ = "0.0.0.dev0"
