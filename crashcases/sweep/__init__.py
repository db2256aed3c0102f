"""Recovery sweeps: recovery time against size, files, data in flight and journal size (host ``engine``, guest ``guest``)."""
