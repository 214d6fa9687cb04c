"""``jupyter pause config``: every setting of the server extension, with its help.

``jupyter server --help-all`` cannot list them: the server parses its command
line, prints its help and exits before it imports any extension (its classes
are fixed in ``ServerApp.classes``).  So the extension's settings are listed
here, from the same traitlets, each once under the class that defines it:
``PauseApp`` and the backends, with their help texts and defaults.  With
``--generate`` they come as a commented section for ``jupyter_server_config.py``.
The server also logs the idle policy in force when it starts.
"""

from __future__ import annotations

import argparse
import textwrap

from traitlets import TraitType


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--generate",
        action="store_true",
        help="print a commented jupyter_server_config.py section instead of the help",
    )


def configurable_classes() -> list[type]:
    """The classes whose settings (``c.<Class>.<name>``) the extension reads."""
    from ..backends import configurable_backend_classes
    from ..server.app import PauseApp

    return [PauseApp, *configurable_backend_classes()]


def own_settings(cls: type) -> dict[str, TraitType]:
    """The settings ``cls`` itself defines: not those inherited from Jupyter's
    application classes, nor those a base listed separately defines."""
    return dict(sorted(cls.class_own_traits(config=True).items()))


def _default(trait: TraitType) -> str:
    try:
        return trait.default_value_repr()
    except AssertionError:  # traitlets cannot repr a Type whose default is None
        return "None"


def _section(cls: type) -> str:
    summary = getattr(cls, "description", "") or (cls.__doc__ or "").strip().split("\n\n")[0]
    lines = [f"#{'-' * 78}", f"# {cls.__name__}"]
    lines.extend(f"# {line.strip()}" for line in summary.splitlines())
    for name, trait in own_settings(cls).items():
        lines.append("#")
        help_text = textwrap.fill(" ".join((trait.help or "").split()), 76)
        lines.extend(f"#  {line}" for line in help_text.splitlines())
        default = _default(trait)
        if "Default:" not in help_text:  # a computed default is described in the help
            lines.append(f"#  Default: {default}")
        lines.append(f"# c.{cls.__name__}.{name} = {default}")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    classes = configurable_classes()
    if args.generate:
        print("# jupyter-pause: settings for jupyter_server_config.py\n")
        print("\n".join(_section(cls) for cls in classes))
        return 0
    print(
        "The jupyter-pause server extension reads these settings from\n"
        "jupyter_server_config.py (c.PauseApp.keep_checkpoints = 10) or the command\n"
        "line (jupyter lab --PauseApp.keep_checkpoints=10).  A backend's settings\n"
        "apply when it is the backend in use (--PauseApp.backend).\n"
    )
    for cls in classes:
        title = f"{cls.__name__} options"
        print(f"{title}\n{'-' * len(title)}")
        for trait in own_settings(cls).values():
            print(cls.class_get_trait_help(trait))
        print()
    return 0
