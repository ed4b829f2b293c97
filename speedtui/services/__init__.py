"""What does I/O for the console, with no Textual: readers of the registry and the journals,
the operator's actions, the audit log and call history files, the config file, the clock and
the adapter to ``speed_runtime``."""
