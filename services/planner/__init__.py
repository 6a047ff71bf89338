"""The planner: turns sweep specs into trial messages and decides what runs next."""
