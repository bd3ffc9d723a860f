"""What the user reads: the findings rendered for a terminal."""
