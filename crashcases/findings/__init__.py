"""What a failing state becomes: the fewest operations that still fail (``shrink``) and reproducers without powercut."""
