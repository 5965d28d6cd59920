"""The broker: the only package that knows trio, kazoo, sockets and time."""


def version() -> str:
    """This installation's version line, `wirebroker X.Y.Z`, as the commands' `--version` print
    it (read from the package's metadata when asked: a broker's start never reads it)."""
    from importlib.metadata import version as installed

    return f"wirebroker {installed('wirebroker')}"
