"""The cluster controller of ZooKeeper mode: the controller task with its election and event
handling (`controller`), the cluster as it knows it (`context`) and in ZooKeeper (`zk_state`),
its requests to the brokers (`request_batch`) over their connections (`channel`), leader
elections (`elections`), topic deletion (`topic_deletion`), partition reassignment
(`reassignment`), and the pure decisions they apply (`decisions`)."""
