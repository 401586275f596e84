"""Builders the tests share: runs, spans and traces to feed harvester, a capturing processor, the
framework drivers' runs. A test module imports from here, never from another test module."""
