"""The code generator: Kafka 3.9 JSON message specs in, committed Python modules out.

Run it with ``python -m protocol._codegen`` (``--check`` to verify the committed output is fresh).
It is a build tool: nothing under `protocol/` imports it at run time.
"""
