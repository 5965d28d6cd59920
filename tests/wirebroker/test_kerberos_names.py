"""`sasl.kerberos.principal.to.local.rules` against Kafka's own examples: KerberosNameTest (its
unit tests) and the rules docs/security.html shows."""

from __future__ import annotations

import pytest

from wirebroker.sasl.kerberos_names import KerberosName, KerberosShortNamer, NoMatchingRule

REALM = "REALM.COM"


def test_parse() -> None:
    namer = KerberosShortNamer(
        [
            r"RULE:[1:$1](App\..*)s/App\.(.*)/$1/g",
            r"RULE:[2:$1](App\..*)s/App\.(.*)/$1/g",
            "DEFAULT",
        ],
    )
    name = KerberosName.parse("App.service-name/example.com@REALM.COM")
    assert (name.service_name, name.host_name, name.realm) == (
        "App.service-name",
        "example.com",
        "REALM.COM",
    )
    assert namer.short_name("App.service-name/example.com@REALM.COM", REALM) == "service-name"
    assert namer.short_name("App.service-name@REALM.COM", REALM) == "service-name"
    assert namer.short_name("user/host@REALM.COM", REALM) == "user"


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("L", ["user", "test", "xyz_user_xyz", "service-name", "user"]),
        ("U", ["USER", "TEST", "XYZ_USER_XYZ", "SERVICE-NAME", "USER"]),
    ],
)
def test_case(flag: str, expected: list[str]) -> None:
    namer = KerberosShortNamer(
        [
            f"RULE:[1:$1]/{flag}",
            f"RULE:[2:$1](Test.*)s/ABC///{flag}",
            f"RULE:[2:$1](ABC.*)s/ABC/XYZ/g/{flag}",
            rf"RULE:[2:$1](App\..*)s/App\.(.*)/$1/g/{flag}",
            f"RULE:[2:$1]/{flag}",
            "DEFAULT",
        ],
    )
    names = [
        "User@REALM.COM",
        "TestABC/host@FOO.COM",
        "ABC_User_ABC/host@FOO.COM",
        "App.SERVICE-name/example.com@REALM.COM",
        "User/root@REALM.COM",
    ]
    assert [namer.short_name(n, REALM) for n in names] == expected


@pytest.mark.parametrize(
    "rule",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/g",
        "rule:[1:$1]",
        "rule:[1:$1]/L/U",
        "rule:[1:$1]/U/L",
        "rule:[1:$1]/LU",
        "RULE:[1:$1/L",
        "RULE:[1:$1]/l",
        "RULE:[2:$1](ABC.*)s/ABC/XYZ/L/g",
    ],
)
def test_invalid_rules(rule: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        KerberosShortNamer([rule])


@pytest.mark.parametrize(
    ("rules", "principal", "expected"),
    [
        # docs/security.html, "Authorization and ACLs": user@MYDOMAIN.COM is user
        (["RULE:[1:$1@$0](.*@MYDOMAIN.COM)s/@.*//", "DEFAULT"], "user@MYDOMAIN.COM", "user"),
        (["RULE:[1:$1@$0](.*@MYDOMAIN.COM)s/@.*///L", "DEFAULT"], "User@MYDOMAIN.COM", "user"),
        (["RULE:[1:$1@$0](.*@MYDOMAIN.COM)s/@.*///U", "DEFAULT"], "user@MYDOMAIN.COM", "USER"),
        # the default: names of the default realm are their first component
        (["DEFAULT"], "kafka/broker1.example.com@REALM.COM", "kafka"),
        (["DEFAULT"], "alice", "alice"),
        # a group of the from pattern, Java's $1
        (
            [r"RULE:[2:$1-$2](kafka-.*)s/^kafka-([^.]*)\..*$/broker-$1/"],
            "kafka/b1.x@R",
            "broker-b1",
        ),
    ],
)
def test_rules(rules: list[str], principal: str, expected: str) -> None:
    assert KerberosShortNamer(rules).short_name(principal, REALM) == expected


def test_no_rule_applies() -> None:
    namer = KerberosShortNamer(["DEFAULT"])
    with pytest.raises(NoMatchingRule, match="No rules apply to alice@OTHER.COM, rules"):
        namer.short_name("alice@OTHER.COM", REALM)


def test_a_name_that_is_not_simple() -> None:
    namer = KerberosShortNamer(["RULE:[1:$1@$0]"])
    with pytest.raises(NoMatchingRule, match="Non-simple name alice@OTHER after"):
        namer.short_name("alice@OTHER", REALM)


def test_malformed_name() -> None:
    with pytest.raises(ValueError, match="Malformed Kerberos name"):
        KerberosName.parse("a/b/c@R")
