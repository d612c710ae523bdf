"""Control: policies, tenancy, staging jobs, probes and the chores registry."""
