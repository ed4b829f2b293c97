"""speed_runtime: a SPEED runtime (Secure Process to Process Encrypted Exchange and Delivery).

Public API only; see docs/ARCHITECTURE.md. This package never imports a UI library.
"""
from .errors import (AccessDeniedError, ConfigError, DeliveryError, DirectoryError, EnvelopeError,
                     InvalidNameError, KeyFileError, LeaseLostError, NameInUseError, NodeClosedError,
                     NodeUnavailableError, SpcError, SpeedError)
from .keyfile import Key, generate_key_file, load_key
from .lease import RegistryEntry
from .message import Message
from .node import Node
from .spc import Service
from .trace import EnvelopeTrace, LeaseTrace, SpcTrace

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError", "ConfigError", "DeliveryError", "DirectoryError", "EnvelopeError",
    "EnvelopeTrace", "InvalidNameError", "Key", "KeyFileError", "LeaseLostError", "LeaseTrace",
    "Message", "NameInUseError", "Node", "NodeClosedError", "NodeUnavailableError", "RegistryEntry",
    "Service", "SpcError", "SpcTrace", "SpeedError", "generate_key_file", "load_key",
]
