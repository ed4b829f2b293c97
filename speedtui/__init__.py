"""speedtui: the Textual operations console for SPEED environments."""

__version__ = "0.1.0"
