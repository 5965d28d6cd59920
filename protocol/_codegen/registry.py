"""Render `protocol/messages/__init__.py`: the registry of every API key."""

from __future__ import annotations

from protocol._codegen.render import HEADER
from protocol._codegen.spec import MessageSpec


def render_registry(apis: list[tuple[MessageSpec, MessageSpec]]) -> str:
    lines = [
        HEADER.format(source="clients/*Request.json and *Response.json"),
        '"""Every Kafka 3.9 API: key, versions, header versions, and its generated classes.',
        "",
        "`APIS[api_key].request_class()` imports the module on first use.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from protocol.schema import ApiInfo",
        "",
        "APIS: dict[int, ApiInfo] = {",
    ]
    for req, resp in apis:
        assert req.valid == resp.valid, f"{req.name} and {resp.name} differ in versions"
        name = req.name.removesuffix("Request")

        def flex_min(m: MessageSpec) -> int | None:
            return None if m.flexible is None or m.flexible[0] > m.valid[1] else m.flexible[0]

        lines.append(
            f"    {req.api_key}: ApiInfo({req.api_key}, {name!r}, {req.source!r}, {req.name!r},"
            f" {resp.name!r}, {req.valid[0]}, {req.valid[1]}, {flex_min(req)}, {flex_min(resp)},"
            f" {tuple(req.listeners)!r}, {req.latest_version_unstable}, {req.deprecated!r}),"
        )
    lines += [
        "}",
        "",
        "API_KEYS_BY_NAME: dict[str, int] = {info.name: key for key, info in APIS.items()}",
    ]
    return "\n".join(lines) + "\n"
