"""Studies: a TOML file of steps over a matrix (``engine``) and the claims of a paper judged against the figures (``claims``)."""
