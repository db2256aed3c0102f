"""Power cuts: live workloads on dm-flakey cut at a chosen moment, recovery timed (host ``engine``, guest ``guest``)."""
