"""``python -m harvester``: the same CLI as the ``harvester`` command."""

from harvester.cli import program

program()
