"""Device-mapper: tables, dmsetup verbs, dm-log-writes recording, the log format, replay, flakey."""
