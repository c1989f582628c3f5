"""The auditor's views: log, show, diff, blame and verify of one agent, and the fleet
view of many.

May import: every package below it (core ... wakeup).
"""
