"""SASL authentication (Kafka's SASL_PLAINTEXT and SASL_SSL: the same exchange over either
transport).

`settings` reads the per-listener mechanisms and JAAS options from the broker config,
`authenticator` is the state of a connection before its authentication completes (Kafka's
SaslServerAuthenticator), `plain` and `scram` are the two mechanisms' servers, and `credentials`
keeps the SCRAM credentials.
"""
