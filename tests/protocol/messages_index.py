"""Every generated top-level message class, for parametrizing tests."""

from __future__ import annotations

import importlib
import pkgutil

import protocol.messages
from protocol.schema import Message


def all_message_classes() -> list[type[Message]]:
    found: dict[str, type[Message]] = {}
    for mod in pkgutil.walk_packages(protocol.messages.__path__, "protocol.messages."):
        module = importlib.import_module(mod.name)
        for name in getattr(module, "__all__", []):
            cls = getattr(module, name)
            found[f"{mod.name}.{name}"] = cls
    return [found[k] for k in sorted(found)]


def all_message_versions() -> list[tuple[type[Message], int]]:
    return [
        (cls, v)
        for cls in all_message_classes()
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
    ]
