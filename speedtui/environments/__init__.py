"""Environments the console can be pointed at without a real one: ``--demo`` (live ``speed node``
processes and a traffic driver) and the deterministic fixture (files only: tests, screenshots,
benchmark)."""
