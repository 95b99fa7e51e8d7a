"""``bin/cluster-sim``: three Liaison hosts, a RabbitMQ cluster and Redis with Sentinel, each in network
namespaces the run makes on a private subnet, driven with jobs while nodes and hosts are killed and cut
off (issue 41, point 4). docs/runbook.md, "Cluster simulation"."""
