"""Support for the scale-out tests: a local S3 server, a Spark standalone cluster, a three-broker Kafka."""
