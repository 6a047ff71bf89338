"""The reporter: leaderboards, CSV and status over the results views."""
