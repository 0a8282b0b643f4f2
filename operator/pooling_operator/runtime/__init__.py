"""The operator's runtime: the work queue and its workers (`core`), leadership (`lease`), the queue itself
(`queue`)."""

from pooling_operator.runtime.core import Runtime
from pooling_operator.runtime.lease import Leadership

__all__ = ["Leadership", "Runtime"]
