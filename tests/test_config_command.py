"""``jupyter pause config`` lists every setting the server extension reads
(``jupyter server --help-all`` cannot: it exits before loading extensions)."""

import re

from traitlets.config import Config

from jupyter_pause import cli
from jupyter_pause.backends.kubernetes.common import KubeBackend
from jupyter_pause.backends.local import LocalBackend
from jupyter_pause.commands.config import configurable_classes, own_settings
from jupyter_pause.server.app import PauseApp


def config_output(capsys, *argv):
    assert cli.main(["config", *argv]) == 0
    return capsys.readouterr().out


def test_every_setting_is_listed_once_with_its_help(capsys):
    out = config_output(capsys)
    listed = re.findall(r"^--(\w+)\.(\w+)=", out, flags=re.M)
    assert len(listed) == len(set(listed))
    for cls in (PauseApp, LocalBackend, KubeBackend):
        for name, trait in cls.class_own_traits(config=True).items():
            assert (cls.__name__, name) in listed
            assert trait.help.split()[0] in out
    assert "--PauseApp.keep_checkpoints=<Int>" in out
    assert "Default: 3" in out
    # Jupyter's own application options are not ours to list
    assert ("PauseApp", "answer_yes") not in listed
    assert ("PauseApp", "static_paths") not in listed


def test_the_generated_section_is_a_valid_config_file_of_the_defaults(capsys):
    out = config_output(capsys, "--generate")
    assignments = [line[2:] for line in out.splitlines() if line.startswith("# c.")]
    assert "c.PauseApp.keep_checkpoints = 3" in assignments
    c = Config()
    exec("\n".join(assignments), {"c": c})  # our own output, uncommented
    classes = configurable_classes()
    assert len(assignments) == sum(len(own_settings(cls)) for cls in classes)
    for cls in classes:
        for name, trait in own_settings(cls).items():
            assert c[cls.__name__][name] == trait.default(), (cls, name)
