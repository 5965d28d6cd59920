"""BROKER_LOGGER resources: the broker's loggers and their levels, changed at run time (KIP-412).

DescribeConfigs of resource type 8 (the name is this broker's id) lists `root` and every
logger the broker's Python code created (`wirebroker.server`, `wirebroker.replication.fetcher`,
`kazoo.client`, ...) with its effective level under log4j's names, as Kafka lists its log4j
loggers (source DYNAMIC_BROKER_LOGGER_CONFIG, no synonyms). IncrementalAlterConfigs SET gives a
logger a level (Kafka's valid names: TRACE, DEBUG, INFO, WARN, ERROR, FATAL), DELETE removes
its own level so it follows its parent again (not for `root`); APPEND and SUBTRACT are refused,
as is a logger that does not exist. Levels are not stored: a restart starts from `--log-level`,
as Kafka starts from its log4j.properties.

Python has no TRACE: it is a level below DEBUG here (5), shown as TRACE; FATAL is CRITICAL.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from protocol.errors import ErrorCode, KafkaError
from wirebroker.config_sources import DYNAMIC_BROKER_LOGGER_CONFIG, UNKNOWN, ConfigValue

ROOT = "root"
TRACE = 5
#: log4j's level names (Kafka's LogLevelConfig.VALID_LOG_LEVELS) as Python levels.
LEVELS = {
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

log = logging.getLogger(__name__)


def level_name(level: int) -> str:
    """The log4j name of a Python level (the nearest at or above it)."""
    for name, value in LEVELS.items():
        if level <= value:
            return name
    return "FATAL"


def _loggers() -> dict[str, logging.Logger]:
    found = {
        name: logger
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    return {ROOT: logging.getLogger(), **dict(sorted(found.items()))}


def describe(broker_id: int, name: str) -> list[ConfigValue]:
    _check_broker(broker_id, name, describing=True)
    return [
        ConfigValue(
            logger_name,
            level_name(logger.getEffectiveLevel()),
            DYNAMIC_BROKER_LOGGER_CONFIG,
            False,
            False,
            UNKNOWN,
            "",
            None,
        )
        for logger_name, logger in _loggers().items()
    ]


def alter(
    broker_id: int,
    name: str,
    operations: Sequence[tuple[str, int, str | None]],
    validate_only: bool,
) -> None:
    """Check every operation first (Kafka's errors), then apply them all."""
    _check_broker(broker_id, name, describing=False)
    loggers = _loggers()
    for logger_name, operation, value in operations:
        if operation in (SET, DELETE) and logger_name not in loggers:
            raise _invalid_config(f"Logger {logger_name} does not exist!")
        if operation == SET and value not in LEVELS:
            raise _invalid_config(
                f"Cannot set the log level of {logger_name} to {value} as it is not a supported "
                f"log level. Valid log levels are {', '.join(sorted(LEVELS))}"
            )
        if operation == DELETE and logger_name == ROOT:
            raise _invalid_request(f"Removing the log level of the {ROOT} logger is not allowed")
        if operation in (APPEND, SUBTRACT):
            verb = "APPEND" if operation == APPEND else "SUBTRACT"
            raise _invalid_request(
                f"{verb} operation is not allowed for the BROKER_LOGGER resource"
            )
        if operation not in (SET, DELETE):
            raise _invalid_request(
                f"Unknown operation type {operation} is not allowed for the BROKER_LOGGER resource"
            )
    if validate_only:
        return
    for logger_name, operation, value in operations:
        logger = loggers[logger_name]
        if operation == SET:
            assert value is not None
            logger.setLevel(LEVELS[value])
            log.warning("Updated the log level of %s to %s", logger_name, value)
        else:
            logger.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", logger_name)


def _check_broker(broker_id: int, name: str, *, describing: bool) -> None:
    if describing and not name:
        raise _invalid_request("Broker id must not be empty")
    try:
        requested = int(name)
    except ValueError:
        what = "Broker" if describing else "Node"
        raise _invalid_request(f"{what} id must be an integer, but it is: {name}") from None
    if requested != broker_id:
        if describing:
            raise _invalid_request(
                f"Unexpected broker id, expected {broker_id} but received {name}"
            )
        raise _invalid_request(f"Unexpected node id. Expected {broker_id}, but received {name}")


def _invalid_config(message: str) -> KafkaError:
    return KafkaError(message, error_code=ErrorCode.INVALID_CONFIG)


def _invalid_request(message: str) -> KafkaError:
    return KafkaError(message, error_code=ErrorCode.INVALID_REQUEST)
