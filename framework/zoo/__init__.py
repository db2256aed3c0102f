"""The zoo: real, upstream-fixed crash-consistency bugs put back into one kernel tree, and the recall run that measures how many powercut finds."""
