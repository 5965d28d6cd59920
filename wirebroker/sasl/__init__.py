"""SASL authentication (Kafka's SASL_PLAINTEXT and SASL_SSL: the same exchange over either
transport).

`settings` reads the per-listener mechanisms and JAAS options from the broker config,
`authenticator` is the state of a connection before its authentication completes (Kafka's
SaslServerAuthenticator), `plain`, `scram` and `oauthbearer` are the mechanisms' servers and
clients, and `credentials` keeps the SCRAM credentials. OAUTHBEARER's secured tokens come from an
identity provider: `jwks` holds the keys they are verified with, `access_token` this broker's own
token, and `provider` what fetching from the provider shares.
"""
