"""The Textual application: the shell (``app.py``: wiring and message routing), its views,
dialogs (``screens/``), widgets, styles and themes. Only this package imports Textual."""
