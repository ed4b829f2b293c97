"""Plain-Python models of the console (no Textual imports): unit-tested on their own."""
