"""The command line's own modules: what `spotsweep submit`, `status`, `ls`, `cancel`, `extend`, `report`,
`top`, `logs`, `checkpoint` and `export` do (spotsweep/cli.py parses the arguments and calls them)."""
