"""Many bundles in one Spark application: read where they lie (a path or
any URI the cluster's Hadoop filesystems read), parsed on the executors,
every table keyed by ``bundle_id``."""
