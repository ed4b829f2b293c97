"""The operator's side of the `control` extension lives in speed_runtime/operator.py; this name
stays for the programs that import it from here."""
from .operator import (Operator, OperatorKey, default_operator_key_path, generate_operator_key,  # noqa: F401
                       load_operator_key)

__all__ = ["Operator", "OperatorKey", "default_operator_key_path", "generate_operator_key", "load_operator_key"]
