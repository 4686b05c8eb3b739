"""Watching a run: its live log, stalls and hangs (stacks, the roll call), stragglers, the passive health
watch, and its first failure read off the nodes: observations the run turns into decisions."""
