"""A SPEED node: the threads and the file system around the pure core (see node.py)."""
from .config import NodeConfig
from .keeper import RUNTIME
from .node import Node

__all__ = ["Node", "NodeConfig", "RUNTIME"]
