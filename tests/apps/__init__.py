"""Agents written the way each framework's own docs write them, for the hermetic replay tests.

Every tool is undecorated (for harvester) and counts its real runs in ``shop.LIVE``: a replay that is
hermetic leaves the counter untouched. ``shop.variant()`` picks what the scripted model does.
"""
