"""The AclAuthorizer's rules, its filters and its file store, without a broker.

The decision tables follow Kafka 3.9's AclAuthorizer (and its AclAuthorizerTest cases): super
users, allow.everyone.if.no.acl.found, DENY over ALLOW, the wildcard resource, principal and
host, prefixes, implied operations, ALL, authorizeByResourceType, and AclBindingFilter matching.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from wirebroker.authorizer.acl_authorizer import (
    AclAuthorizer,
    host_address,
    parse_super_users,
)
from wirebroker.authorizer.acl_store import FileAclStore
from wirebroker.authorizer.acls import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    acls_from_json,
    acls_to_json,
    operations_bits,
)
from wirebroker.zk import znodes

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def ace(
    principal: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW, host: str = "*"
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def topic(name: str, pattern: PatternType = Pat.LITERAL) -> ResourcePattern:
    return ResourcePattern(Res.TOPIC, name, pattern)


def authorizer(
    acls: dict[ResourcePattern, set[AccessControlEntry]],
    super_users: str = "",
    allow_if_no_acl: bool = False,
) -> AclAuthorizer:
    store = FileAclStore(Path("/nonexistent/acls.json"))
    store.acls = {p: frozenset(e) for p, e in acls.items()}
    return AclAuthorizer(store, parse_super_users(super_users), allow_if_no_acl)


def may(a: AclAuthorizer, principal: str, op: AclOperation, name: str, host: str = HOST) -> bool:
    return a.authorize(principal, host, "Test", op, Res.TOPIC, name)


def test_no_acl_denies_unless_allow_everyone() -> None:
    assert not may(authorizer({}), ALICE, Op.READ, "t")
    assert may(authorizer({}, allow_if_no_acl=True), ALICE, Op.READ, "t")
    # ... but an ACL on the resource, even for someone else, takes over
    someone = authorizer({topic("t"): {ace(BOB, Op.READ)}}, allow_if_no_acl=True)
    assert not may(someone, ALICE, Op.READ, "t")
    assert may(someone, ALICE, Op.READ, "other")


def test_super_users_may_do_everything() -> None:
    denied = authorizer({topic("t"): {ace(ALICE, Op.ALL, Perm.DENY)}}, "User:bob; User:alice")
    assert may(denied, ALICE, Op.WRITE, "t")
    with pytest.raises(ValueError):
        parse_super_users("alice")


def test_deny_wins_and_principal_host_wildcards() -> None:
    a = authorizer(
        {
            topic("t"): {
                ace("User:*", Op.READ),
                ace(BOB, Op.READ, Perm.DENY, host=HOST),
            }
        }
    )
    assert may(a, ALICE, Op.READ, "t")
    assert not may(a, BOB, Op.READ, "t")
    assert may(a, BOB, Op.READ, "t", host="10.0.0.2")  # the DENY names one host
    assert not may(a, ALICE, Op.WRITE, "t")
    # a DENY of READ does not deny DESCRIBE, which the wildcard principal's READ implies
    assert may(a, BOB, Op.DESCRIBE, "t")


def test_implied_operations_and_all() -> None:
    implies = {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    for op in implies:
        assert may(authorizer({topic("t"): {ace(ALICE, op)}}), ALICE, Op.DESCRIBE, "t"), op
    for op in set(Op) - implies - {Op.DESCRIBE, Op.ALL, Op.ANY, Op.UNKNOWN}:
        assert not may(authorizer({topic("t"): {ace(ALICE, op)}}), ALICE, Op.DESCRIBE, "t"), op
    configs = authorizer({topic("t"): {ace(ALICE, Op.ALTER_CONFIGS)}})
    assert may(configs, ALICE, Op.DESCRIBE_CONFIGS, "t")
    assert not may(configs, ALICE, Op.ALTER, "t")
    everything = authorizer({topic("t"): {ace(ALICE, Op.ALL)}})
    assert all(may(everything, ALICE, op, "t") for op in (Op.READ, Op.CREATE, Op.ALTER_CONFIGS))
    # DENY of DESCRIBE is not implied by DENY of READ, but DENY ALL denies everything
    deny_all = authorizer({topic("t"): {ace(ALICE, Op.ALL), ace(ALICE, Op.ALL, Perm.DENY)}})
    assert not may(deny_all, ALICE, Op.DESCRIBE, "t")


def test_wildcard_and_prefixed_resources() -> None:
    a = authorizer(
        {
            topic("*"): {ace(ALICE, Op.DESCRIBE)},
            topic("app-", Pat.PREFIXED): {ace(ALICE, Op.WRITE)},
            topic("app-secret", Pat.PREFIXED): {ace(ALICE, Op.WRITE, Perm.DENY)},
            topic("app-x"): {ace(BOB, Op.WRITE)},
        }
    )
    assert may(a, ALICE, Op.DESCRIBE, "anything")
    assert may(a, ALICE, Op.WRITE, "app-1")
    assert may(a, ALICE, Op.WRITE, "app-")
    assert not may(a, ALICE, Op.WRITE, "app")  # shorter than the prefix
    assert not may(a, ALICE, Op.WRITE, "app-secret-2")  # a longer DENY prefix
    assert may(a, ALICE, Op.WRITE, "app-x")  # literal ACLs add to prefixed ones
    assert may(a, BOB, Op.WRITE, "app-x") and not may(a, BOB, Op.WRITE, "app-y")


def test_hosts_are_compared_as_java_prints_them() -> None:
    assert host_address("::1") == "0:0:0:0:0:0:0:1"
    assert host_address("::ffff:10.0.0.1") == "10.0.0.1"
    assert host_address("10.0.0.1") == "10.0.0.1"
    a = authorizer({topic("t"): {ace(ALICE, Op.READ, host="0:0:0:0:0:0:0:1")}})
    assert may(a, ALICE, Op.READ, "t", host="::1")


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    a = authorizer({})
    assert not may(a, ALICE, Op.READ, "t")
    (tmp_path / "a-file").write_text("")
    a.store = FileAclStore(tmp_path / "a-file" / "acls.json")  # cannot be written
    failures = trio.run(a.create_acls, [(topic("t"), ace(ALICE, Op.READ))])
    assert failures == [f"cannot write {tmp_path}/a-file/acls.json: Not a directory"]
    assert not may(a, ALICE, Op.READ, "t") and not a.store.acls


def test_create_describe_delete_in_a_file_that_survives(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"

    async def main() -> None:
        store = FileAclStore(path)
        await store.load()
        a = AclAuthorizer(store, frozenset(), False)
        assert not may(a, ALICE, Op.READ, "t")
        bindings = [
            (topic("t"), ace(ALICE, Op.READ)),
            (topic("t"), ace(BOB, Op.READ)),
            (topic("p-", Pat.PREFIXED), ace(ALICE, Op.WRITE)),
            (ResourcePattern(Res.GROUP, "g", Pat.LITERAL), ace(ALICE, Op.READ)),
        ]
        assert await a.create_acls(bindings) == [None] * 4
        assert may(a, ALICE, Op.READ, "t")  # the memo was dropped
        assert may(a, ALICE, Op.WRITE, "p-1")

        again = FileAclStore(path)  # a restart
        await again.load()
        assert again.acls == store.acls

        every = AclBindingFilter(
            ResourcePatternFilter(Res.ANY, None, Pat.ANY),
            AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY),
        )
        assert sorted(map(str, (p for p, _ in a.acls(every)))) == sorted(
            map(str, (p for p, _ in bindings))
        )
        alice_only = AclBindingFilter(
            ResourcePatternFilter(Res.TOPIC, "t", Pat.LITERAL),
            AccessControlEntryFilter(ALICE, None, Op.ANY, Perm.ANY),
        )
        (deleted,) = await a.delete_acls([alice_only])
        assert deleted == [((topic("t"), ace(ALICE, Op.READ)), None)]
        assert not may(a, ALICE, Op.READ, "t") and may(a, BOB, Op.READ, "t")
        # two filters matching one binding: the first reports it
        by_type = AclBindingFilter(
            ResourcePatternFilter(Res.GROUP, None, Pat.ANY),
            AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY),
        )
        first, second = await a.delete_acls([by_type, every])
        assert [b[0].resource_type for b, _ in first] == [Res.GROUP]
        assert {b[0].name for b, _ in second} == {"t", "p-"}
        assert not a.store.acls
        assert json.loads(path.read_text()) == {"version": 1, "resources": []}

    trio.run(main)


def test_authorize_any_is_kafkas_authorize_by_resource_type() -> None:
    def any_write(acls: dict[ResourcePattern, set[AccessControlEntry]], **kw: object) -> bool:
        return authorizer(acls, **kw).authorize_any(ALICE, HOST, "Test", Op.WRITE, Res.TOPIC)  # type: ignore[arg-type]

    assert not any_write({})
    assert any_write({}, allow_if_no_acl=True)
    assert any_write({topic("t"): {ace(ALICE, Op.WRITE)}})
    assert not any_write({topic("t"): {ace(ALICE, Op.READ)}})  # another operation
    assert any_write({topic("t"): {ace(ALICE, Op.ALL)}})
    assert not any_write({topic("t"): {ace(ALICE, Op.WRITE), ace(ALICE, Op.WRITE, Perm.DENY)}})
    assert not any_write({topic("*"): {ace(ALICE, Op.WRITE, Perm.DENY)}}, allow_if_no_acl=True)
    denied_prefix = {
        topic("a", Pat.PREFIXED): {ace(ALICE, Op.WRITE, Perm.DENY)},
        topic("ab"): {ace(ALICE, Op.WRITE)},
        topic("abc", Pat.PREFIXED): {ace(ALICE, Op.WRITE)},
    }
    assert not any_write(denied_prefix)
    assert any_write({**denied_prefix, topic("b"): {ace(ALICE, Op.WRITE)}})
    assert any_write({topic("*"): {ace("User:*", Op.WRITE)}})


def test_authorized_operations_bits() -> None:
    a = authorizer({topic("t"): {ace(ALICE, Op.WRITE), ace(ALICE, Op.DESCRIBE_CONFIGS)}})
    bits = a.authorized_operations(ALICE, HOST, Res.TOPIC, "t")
    assert bits == operations_bits([Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS])


def test_resource_pattern_filters_as_kafka() -> None:
    literal, prefixed, wildcard = topic("foo"), topic("fo", Pat.PREFIXED), topic("*")
    match = ResourcePatternFilter(Res.TOPIC, "foo", Pat.MATCH)
    assert match.matches(literal) and match.matches(prefixed) and match.matches(wildcard)
    assert not match.matches(topic("f", Pat.LITERAL)) and not match.matches(
        topic("foox", Pat.PREFIXED)
    )
    any_foo = ResourcePatternFilter(Res.TOPIC, "foo", Pat.ANY)
    assert any_foo.matches(literal) and any_foo.matches(topic("foo", Pat.PREFIXED))
    assert not any_foo.matches(prefixed) and not any_foo.matches(wildcard)
    assert ResourcePatternFilter(Res.ANY, None, Pat.ANY).matches(prefixed)
    assert not ResourcePatternFilter(Res.GROUP, None, Pat.ANY).matches(literal)
    assert not ResourcePatternFilter(Res.TOPIC, None, Pat.MATCH).matches_at_most_one()
    assert any_foo.candidates() == [topic("foo"), topic("foo", Pat.PREFIXED)]


def test_kafka_json_of_acls() -> None:
    entries = frozenset({ace(ALICE, Op.IDEMPOTENT_WRITE), ace(BOB, Op.READ, Perm.DENY, "h")})
    data = acls_to_json(entries)
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {
                "principal": ALICE,
                "permissionType": "Allow",
                "operation": "IdempotentWrite",
                "host": "*",
            },
            {"principal": BOB, "permissionType": "Deny", "operation": "Read", "host": "h"},
        ],
    }
    assert acls_from_json(data) == entries
    # what an older Kafka wrote: upper-case names
    old = b'{"version":1,"acls":[{"principal":"User:a","permissionType":"ALLOW","operation":"READ","host":"*"}]}'
    assert acls_from_json(old) == {ace("User:a", Op.READ)}


def test_acl_znodes_and_change_notifications() -> None:
    assert znodes.acl_path(ResourcePattern(Res.TRANSACTIONAL_ID, "tx", Pat.LITERAL)) == (
        "/kafka-acl/TransactionalId/tx"
    )
    prefixed = ResourcePattern(Res.GROUP, "g-", Pat.PREFIXED)
    assert znodes.acl_path(prefixed) == "/kafka-acl-extended/prefixed/Group/g-"
    literal = topic("a:b")
    assert znodes.encode_acl_change(literal) == b"TOPIC:a:b"  # Kafka 3.9's legacy form
    assert znodes.decode_acl_change(Pat.LITERAL, b"TOPIC:a:b") == literal
    assert json.loads(znodes.encode_acl_change(prefixed)) == {
        "version": 1,
        "resourceType": "GROUP",
        "name": "g-",
        "patternType": "PREFIXED",
    }
    assert znodes.decode_acl_change(Pat.PREFIXED, znodes.encode_acl_change(prefixed)) == prefixed
    with pytest.raises(ValueError):
        znodes.decode_acl_change(Pat.LITERAL, b"no separator")
