"""The spotsweep services: planner, agent, collector, reporter, and local mode."""
