"""The broker: the only package that knows trio, kazoo, sockets and time."""
