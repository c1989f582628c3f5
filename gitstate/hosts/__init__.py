"""Wiring gitstate into agent hosts: ``gitstate install`` for each host's settings
files (read and merged without loss), and the check of what is wired.

May import: every package below it (core ... mcp).
"""
