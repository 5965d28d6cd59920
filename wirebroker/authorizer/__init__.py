"""Authorization: Kafka's AclAuthorizer (`authorizer.class.name`) and where its ACLs are kept.

`acls` is the vocabulary (resource types, pattern types, operations, bindings, filters and
their JSON), pure; `acl_authorizer` decides who may do what, from a cache of the ACLs, and
logs the decisions as Kafka's authorizer logger does; `acl_store` keeps the ACLs: in ZooKeeper
as Kafka does in a cluster, in a file for the embedded broker. Handlers ask through
`RequestContext.authorize` and its helpers (`wirebroker.dispatch`).
"""
