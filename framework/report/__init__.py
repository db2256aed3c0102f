"""What a run answers, read back from the results store: the HTML report and compare."""
