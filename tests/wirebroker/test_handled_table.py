"""`wirebroker.handlers.HANDLED`, the table ApiVersions answers from and the dispatcher imports
handler modules by, is what the handler modules register: with every module of the package
imported, each API is registered by the table's module at the table's versions and the table
names nothing more; a registration that differs from it is refused."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from protocol.messages import APIS
from protocol.messages.produce import ProduceRequest
from wirebroker import handlers
from wirebroker.dispatch import REGISTRY, VERSIONS, handles
from wirebroker.handlers import HANDLED


def test_the_table_is_what_the_handler_modules_register() -> None:
    for module in pkgutil.iter_modules(handlers.__path__):
        importlib.import_module(f"{handlers.__name__}.{module.name}")
    registered = {
        APIS[key].name: (
            reg.handler.__module__.removeprefix(f"{handlers.__name__}."),
            reg.min_version,
            reg.max_version,
        )
        for key, reg in dict(REGISTRY).items()
    }
    assert registered == HANDLED
    assert list(VERSIONS) == sorted(REGISTRY)


async def produce_elsewhere(ctx: object, request: object) -> None:
    """A Produce handler the table does not name."""


def test_a_registration_other_than_the_table_is_refused() -> None:
    with pytest.raises(ValueError, match="HANDLED says"):
        handles(ProduceRequest, (0, 11))(produce_elsewhere)
    produce_elsewhere.__module__ = "wirebroker.handlers.produce"
    with pytest.raises(ValueError, match="HANDLED says"):
        handles(ProduceRequest, (0, 10))(produce_elsewhere)


def test_an_api_not_handled_is_not_found() -> None:
    unhandled = next(key for key in APIS if key not in VERSIONS)
    with pytest.raises(KeyError):
        REGISTRY[unhandled]
